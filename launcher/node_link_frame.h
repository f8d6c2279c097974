#pragma once
// The wire format of the per-node launchers' link (launcher/node_link.h), apart from the sockets so that the
// fuzzer (fuzz/node_link_fuzzer.cc) and the tests reach it: one fixed-size 256-byte frame per message, integers
// in network order, read only after the peer proved the job secret (comm/job_secret.h, context kNodeLinkContext).
// Pure functions; thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::launcher {

constexpr uint32_t kNodeLinkMagic = 0x64744e4c;                 // "dtNL"
constexpr const char* kNodeLinkContext = "dtrain node-link 2";  // in the job-secret proofs
enum NodeLinkKind : uint32_t { kHello = 1, kReady, kError, kAlive, kStop, kDone };

struct NodeLinkFrame {
  uint32_t magic;
  uint32_t kind;
  int32_t node;
  int32_t a;  // hello: nnodes; stop: exit code
  int32_t b;  // hello: attempt
  char text[236];
};
static_assert(sizeof(NodeLinkFrame) == 256, "frame size is part of the protocol");

// A decoded frame. `text` has at most 235 bytes and no NUL.
struct NodeLinkMessage {
  uint32_t kind = 0;
  int node = 0, a = 0, b = 0;
  std::string text;
};

// A frame for `kind` (text cut to 235 bytes).
NodeLinkFrame MakeNodeLinkFrame(uint32_t kind, int node, int a, int b, const std::string& text);
// InvalidArgument "<what> is not a dtrain launcher (bad magic)"; else *m.
Status DecodeNodeLinkFrame(const NodeLinkFrame& frame, const std::string& what, NodeLinkMessage* m);
// Node 0's check of a hello from `from` against its own nnodes and attempt, `joined[n]` saying which nodes are in
// (joined.size() == nnodes). "" when it is acceptable (then 1 <= hello.node < nnodes, not joined); else the reason.
std::string CheckNodeLinkHello(const NodeLinkMessage& hello, int nnodes, int attempt, const std::vector<bool>& joined,
                               const std::string& from);

}  // namespace dtrain::launcher
