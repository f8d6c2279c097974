#include "launcher/node_link_frame.h"

#include <arpa/inet.h>

#include <cstring>

namespace dtrain::launcher {

NodeLinkFrame MakeNodeLinkFrame(uint32_t kind, int node, int a, int b, const std::string& text) {
  NodeLinkFrame f = {};
  f.magic = htonl(kNodeLinkMagic);
  f.kind = htonl(kind);
  f.node = static_cast<int32_t>(htonl(static_cast<uint32_t>(node)));
  f.a = static_cast<int32_t>(htonl(static_cast<uint32_t>(a)));
  f.b = static_cast<int32_t>(htonl(static_cast<uint32_t>(b)));
  std::strncpy(f.text, text.c_str(), sizeof(f.text) - 1);
  return f;
}

Status DecodeNodeLinkFrame(const NodeLinkFrame& frame, const std::string& what, NodeLinkMessage* m) {
  if (ntohl(frame.magic) != kNodeLinkMagic) {
    return Status::InvalidArgument(what + " is not a dtrain launcher (bad magic)");
  }
  m->kind = ntohl(frame.kind);
  m->node = static_cast<int32_t>(ntohl(static_cast<uint32_t>(frame.node)));
  m->a = static_cast<int32_t>(ntohl(static_cast<uint32_t>(frame.a)));
  m->b = static_cast<int32_t>(ntohl(static_cast<uint32_t>(frame.b)));
  m->text.assign(frame.text, strnlen(frame.text, sizeof(frame.text) - 1));
  return Status::OK();
}

std::string CheckNodeLinkHello(const NodeLinkMessage& hello, int nnodes, int attempt, const std::vector<bool>& joined,
                               const std::string& from) {
  if (hello.kind != kHello) return "expected a hello";
  if (hello.a != nnodes) {
    return "--nnodes differs: node 0 has " + std::to_string(nnodes) + ", node " + std::to_string(hello.node) + " has " +
           std::to_string(hello.a);
  }
  if (hello.node < 1 || hello.node >= nnodes) {
    return "--node-rank " + std::to_string(hello.node) + " is out of range 1.." + std::to_string(nnodes - 1);
  }
  if (static_cast<size_t>(hello.node) >= joined.size() || joined[hello.node]) {
    return "two launchers say --node-rank " + std::to_string(hello.node) + " (the second from " + from + ")";
  }
  if (hello.b != attempt) {
    return "node " + std::to_string(hello.node) + " is at attempt " + std::to_string(hello.b + 1) +
           ", node 0 at attempt " + std::to_string(attempt + 1);
  }
  return "";
}

}  // namespace dtrain::launcher
