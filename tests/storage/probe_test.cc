// ProbeStorage, the storage preflight, against file://: a good directory, a read-only one, a store that
// loses bytes or cannot delete (DTRAIN_STORAGE_FAULT). Against a real S3 server: s3_probe_test.cc.

#include "storage/probe.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/subprocess.h"

namespace dtrain::storage {
namespace {

using testing::TempDir;

std::vector<ObjectInfo> ListAll(Storage* s) {
  std::vector<ObjectInfo> all;
  EXPECT_TRUE(s->List("", &all).ok());
  return all;
}

// ---- file:// --------------------------------------------------------------------------------

TEST(ProbeFileTest, GoodDirectoryPassesAndLeavesNothingBehind) {
  TempDir dir;
  std::unique_ptr<Storage> s;
  ASSERT_TRUE(Storage::Open("file://" + dir.path() + "/ckpt", StorageOptions{}, &s).ok());
  const Status st = ProbeStorage(s.get(), "");
  ASSERT_TRUE(st.ok()) << st.ToString();
  const Status sub = ProbeStorage(s.get(), "run1/");
  ASSERT_TRUE(sub.ok()) << sub.ToString();
  EXPECT_TRUE(ListAll(s.get()).empty());
}

// A read-only directory: fine to read (need_write=false), but the probe's write fails with errno's text. Root writes
// anywhere, so as root the probe runs in a child that has become `nobody` (uid/gid 65534); the result comes back
// through a pipe as "<code>\n<message>".
TEST(ProbeFileTest, ReadOnlyDirectoryIsNotWritable) {
  TempDir dir;
  const std::string ro = dir.path() + "/ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    std::unique_ptr<Storage> s;
    Status st = Storage::Open("file://" + ro, StorageOptions{}, &s);
    if (st.ok()) st = ProbeStorage(s.get(), "", /*need_write=*/false);  // reading is allowed
    if (st.ok()) st = ProbeStorage(s.get(), "");
    const std::string out = std::string(CodeName(st.code())) + "\n" + st.message();
    const bool sent = ::write(fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
    ::_exit(sent ? 0 : 4);
  }
  ::close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child status " << wstatus;
  EXPECT_EQ(got.substr(0, got.find('\n')), "IoError") << got;
  EXPECT_NE(got.find("storage preflight of file://" + ro + ": not writable (writing probe object '.dtrain-probe-"),
            std::string::npos)
      << got;
  EXPECT_NE(got.find("Permission denied"), std::string::npos) << got;
}

class ProbeFaultTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("DTRAIN_STORAGE_FAULT"); }
  std::unique_ptr<Storage> OpenWithFault(const char* fault) {
    ::setenv("DTRAIN_STORAGE_FAULT", fault, 1);
    std::unique_ptr<Storage> s;
    EXPECT_TRUE(Storage::Open("file://" + dir_.path() + "/ckpt", StorageOptions{}, &s).ok());
    return s;
  }
  TempDir dir_;
};

TEST_F(ProbeFaultTest, BytesThatDoNotComeBackAreDataLossAndTheProbeObjectIsRemoved) {
  auto s = OpenWithFault("op=get,action=partial,bytes=10");
  const Status st = ProbeStorage(s.get(), "p/");
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("storage preflight of file://" + dir_.path() + "/ckpt: probe object 'p/.dtrain-probe-"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("written but not read back: read back 10 bytes that differ from the 64 written"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(ListAll(s.get()).empty());
}

TEST_F(ProbeFaultTest, AStoreThatCannotDeleteFailsNamingTheObject) {
  auto s = OpenWithFault("op=delete,action=error");
  const Status st = ProbeStorage(s.get(), "");
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find(": cannot delete probe object '.dtrain-probe-"), std::string::npos) << st.message();
}

TEST_F(ProbeFaultTest, AListingErrorIsReportedFirst) {
  auto s = OpenWithFault("op=list,action=error");
  const Status st = ProbeStorage(s.get(), "x/");
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("storage preflight of file://" + dir_.path() + "/ckpt: cannot list 'x/': "),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace dtrain::storage
