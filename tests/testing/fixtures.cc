#include "tests/testing/fixtures.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain::testing {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/dtrain_test_XXXXXX";
  if (mkdtemp(templ.data()) != nullptr) path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

bool HaveFashionMnist() { return std::ifstream(kFashionMnistDir + "/train-images-idx3-ubyte.gz").good(); }

bool WaitUntil(const std::function<bool()>& done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

int CudaDeviceCount() {
#if DT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver: clear the sticky error for the tests that follow
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

HeldLoopbackPort::HeldLoopbackPort() {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(fd_, 1) == 0 &&
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port_ = ntohs(a.sin_port);
  }
}

HeldLoopbackPort::~HeldLoopbackPort() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace dtrain::testing
