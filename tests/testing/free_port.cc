#include "tests/testing/free_port.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace dtrain::testing {
namespace {

// A socket bound to 127.0.0.1:port (close it), or -1.
int BindLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int FreeLoopbackPorts(int count) {
  std::mt19937 rng(std::random_device{}());
  for (int tries = 0; tries < 200; ++tries) {
    const int port = 20000 + static_cast<int>(rng() % 12000);
    int free = 0;
    for (; free < count; ++free) {
      const int fd = BindLoopback(port + free);
      if (fd < 0) break;
      ::close(fd);
    }
    if (free == count) return port;
  }
  ADD_FAILURE() << "no " << count << " free consecutive ports on 127.0.0.1 in [20000, 32000)";
  return 0;
}

}  // namespace dtrain::testing
