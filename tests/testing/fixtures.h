#pragma once
// What many tests need and no test should copy: a temporary directory, the real Fashion-MNIST's presence (Debian's
// dataset-fashion-mnist), waiting for a condition instead of sleeping and then asserting, and the GPU skip.
//
//   TempDir dir;                          // a fresh directory, removed with its contents at the end of scope
//   DT_SKIP_WITHOUT_FASHION_MNIST();      // GTEST_SKIP with the package to install when the dataset is missing
//   ASSERT_TRUE(WaitUntil([&] { return Exists(dir.File("done")); }, 10.0));
//   DT_SKIP_WITHOUT_GPU("the graph capture");

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace dtrain::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Where Debian's dataset-fashion-mnist installs the four IDX files.
inline const std::string kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// True when the training images are there (the tests that train the MLP or CNN on real data need them).
bool HaveFashionMnist();

// Calls `done` every 10 ms until it returns true (-> true) or `timeout_s` has passed (-> false, after one last
// call). For conditions another process or thread brings about: no fixed sleep before an assertion.
bool WaitUntil(const std::function<bool()>& done, double timeout_s);

// The number of CUDA devices this process sees (0 in a build without CUDA or without a driver).
int CudaDeviceCount();

// A TCP port on 127.0.0.1 that this process holds (bound and listening; the kernel picked it) until the end of
// scope: "address already in use" for whatever the test points at it. port() is 0 when it could not be taken.
class HeldLoopbackPort {
 public:
  HeldLoopbackPort();
  ~HeldLoopbackPort();
  HeldLoopbackPort(const HeldLoopbackPort&) = delete;
  HeldLoopbackPort& operator=(const HeldLoopbackPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace dtrain::testing

#define DT_SKIP_WITHOUT_FASHION_MNIST()                                                      \
  do {                                                                                       \
    if (!::dtrain::testing::HaveFashionMnist())                                              \
      GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; \
  } while (0)

// `what` says what needs the GPU, for the skip line ("no CUDA device: the graph capture needs a GPU").
#define DT_SKIP_WITHOUT_GPU(what)                                                                                \
  do {                                                                                                           \
    if (::dtrain::testing::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << what << " needs a GPU"; \
  } while (0)
