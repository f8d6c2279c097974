#pragma once
// Ports for end-to-end tests of `dtrain launch --master-port P`, which listens on P and P + 1.

namespace dtrain::testing {

// A port P with P and P + 1 both free on 127.0.0.1 right now, picked at random below Linux's ephemeral range
// (32768-60999): a port the kernel hands out (bind to 0) can have a neighbour that another test's outgoing connection
// takes a moment later (CI's plain stage once failed "bind: Address already in use" on MASTER_PORT + 1 so). Fails the
// test (ADD_FAILURE) and returns 0 when 200 tries find no pair.
int FreePortPair();

}  // namespace dtrain::testing
