#pragma once
// Ports for tests that must name a port before something listens on it (`dtrain launch --master-port P`, which
// listens on P and P + 1; run.prometheus_port; a rendezvous's MASTER_PORT).

namespace dtrain::testing {

// A port P with P .. P + count - 1 all free on 127.0.0.1 right now, picked at random below Linux's ephemeral range
// (32768-60999). A port the kernel hands out (bind to 0, then close) is one another test's outgoing connection can
// take a moment later, before the test's server binds it: CI's plain stage failed so on MASTER_PORT + 1 and on a
// run.prometheus_port ("Address already in use"). Fails the test (ADD_FAILURE) and returns 0 when 200 tries find none.
int FreeLoopbackPorts(int count);

// FreeLoopbackPorts(1).
inline int FreeLoopbackPort() { return FreeLoopbackPorts(1); }

}  // namespace dtrain::testing
