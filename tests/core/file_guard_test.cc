// core/file_guard.h and core/checked_math.h: a FIFO, a directory or a socket is refused by name without blocking;
// MoveAside renames and never deletes; PathWithin resolves symlinks and paths that do not exist yet; checked
// products refuse what does not fit, naming what was computed.

#include "core/file_guard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/checked_math.h"
#include "core/redact_url.h"
#include "tests/testing/subprocess.h"

namespace dtrain {
namespace {

using testing::TempDir;

std::string Slurp(const std::string& p) {
  std::string s;
  EXPECT_TRUE(ReadRegularFile(p, "test", &s).ok());
  return s;
}

TEST(FileGuard, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.path() + "/config.yaml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string text;
  const Status st = ReadRegularFile(fifo, "config", &text);  // a plain open() would block here forever
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "config '" + fifo + "': is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(CheckRegularFile(fifo, "--hostfile").code(), Status::Code::kInvalidArgument);
  EXPECT_NE(CheckRegularFile(dir.path(), "shard").message().find("is a directory"), std::string::npos);
  EXPECT_EQ(CheckRegularFile(dir.path() + "/none", "shard").code(), Status::Code::kNotFound);
  testing::WriteFile(dir.path() + "/ok", "abc");
  EXPECT_EQ(Slurp(dir.path() + "/ok"), "abc");
}

TEST(FileGuard, MoveAsideRenamesAndNeverDeletes) {
  TempDir dir;
  const std::string p = dir.path() + "/model.safetensors";
  testing::WriteFile(p, "one");
  std::string first, second;
  ASSERT_TRUE(MoveAside(p, &first).ok());
  EXPECT_EQ(first.rfind(p + ".replaced-", 0), 0u) << first;
  testing::WriteFile(p, "two");
  ASSERT_TRUE(MoveAside(p, &second).ok());  // the same second: a "-2" suffix, the first one kept
  EXPECT_NE(first, second);
  EXPECT_EQ(Slurp(first), "one");
  EXPECT_EQ(Slurp(second), "two");
  EXPECT_NE(access(p.c_str(), F_OK), 0);
}

TEST(FileGuard, PathWithinResolvesLinksAndNewPaths) {
  TempDir dir;
  const std::string store = dir.path() + "/ckpt";
  ASSERT_EQ(mkdir(store.c_str(), 0755), 0);
  ASSERT_EQ(symlink(store.c_str(), (dir.path() + "/link").c_str()), 0);
  EXPECT_TRUE(PathWithin(store + "/step-1/params.bin", store));          // does not exist yet
  EXPECT_TRUE(PathWithin(dir.path() + "/link/new.safetensors", store));  // through a symlink
  EXPECT_TRUE(PathWithin(dir.path() + "/x/../ckpt/a", store));
  EXPECT_TRUE(PathWithin(store, store));
  EXPECT_FALSE(PathWithin(dir.path() + "/ckpt2/a", store));  // a sibling with the same prefix
  EXPECT_FALSE(PathWithin(dir.path() + "/out.safetensors", store));
}

TEST(CheckedMath, ProductsThatDoNotFitAreRefusedNamingWhat) {
  int64_t out = 7;
  const Status st = CheckedMul<int64_t>(std::numeric_limits<int64_t>::max() / 2, 78, "train.epochs x steps", &out);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("train.epochs x steps: 4611686018427387903 x 78 does not fit"), std::string::npos)
      << st.message();
  EXPECT_EQ(out, 7);
  ASSERT_TRUE(CheckedMul<int64_t>(3, 78, "x", &out).ok());
  EXPECT_EQ(out, 234);
  EXPECT_FALSE(CheckedAdd<int64_t>(std::numeric_limits<int64_t>::max(), 1, "y", &out).ok());
}

TEST(RedactUrl, CredentialsNeverSurvive) {
  EXPECT_EQ(RedactUrl("http://user:hunter2@127.0.0.1:7480"), "http://<redacted>@127.0.0.1:7480");
  EXPECT_EQ(RedactUrl("s3://AKIA:secret@bucket/run"), "s3://<redacted>@bucket/run");
  EXPECT_EQ(RedactUrl("https://h/p?X-Amz-Signature=abc"), "https://h/p?<redacted>");
  EXPECT_EQ(RedactUrl("s3://bucket/a@b"), "s3://bucket/a@b");
  EXPECT_EQ(RedactUrl("runs/x"), "runs/x");
}

}  // namespace
}  // namespace dtrain
