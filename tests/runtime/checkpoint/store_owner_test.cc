// StoreOwner on a real file:// store. The object protocol (as for s3://, run on a file:// store): a live owner
// refuses a second job, a stale one is taken over, as is a fresh one whose pid no longer exists on this host, a
// take-over stops the first job at its next refresh, and a clean end leaves no owner object. A local root's file
// lock: a second job is refused naming the holder's pid, a clean end removes the lock file.

#include "runtime/checkpoint/store_owner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

std::unique_ptr<storage::Storage> Open(const std::string& dir) {
  std::unique_ptr<storage::Storage> s;
  EXPECT_TRUE(storage::Storage::Open(dir, {}, &s).ok());
  return s;
}

void Plant(storage::Storage* s, const std::string& token, double heartbeat) {
  const std::string text =
      "token=" + token + "\nhost=otherhost\npid=4242\nstarted=1\nheartbeat=" + std::to_string(heartbeat) + "\n";
  ASSERT_TRUE(s->Put(StoreOwner::kKey, text.data(), text.size()).ok());
}

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

StoreOwner::Options Fast() {
  StoreOwner::Options o;
  o.settle_s = 0.01;
  o.lock_local_dirs = false;  // the object protocol of s3:// roots
  return o;
}

std::string Host() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// A pid that is certainly gone: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST(StoreOwner, ALiveOwnerRefusesASecondJobNamingIt) {
  testing::TempDir dir;
  auto store = Open(dir.path());
  std::unique_ptr<StoreOwner> first, second;
  ASSERT_TRUE(StoreOwner::Acquire(store.get(), Fast(), &first).ok());
  const Status st = StoreOwner::Acquire(store.get(), Fast(), &second);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("is in use by another job: host "), std::string::npos) << st.ToString();
  EXPECT_EQ(second, nullptr);
  first.reset();  // a clean end removes the owner object
  std::string text;
  EXPECT_EQ(store->Get(StoreOwner::kKey, &text).code(), Status::Code::kNotFound);
  EXPECT_TRUE(StoreOwner::Acquire(store.get(), Fast(), &second).ok());
}

TEST(StoreOwner, AStaleOwnerIsTakenOverWithANote) {
  testing::TempDir dir;
  auto store = Open(dir.path());
  Plant(store.get(), "dead", Now() - 1000);
  std::unique_ptr<StoreOwner> owner;
  std::string note;
  ASSERT_TRUE(StoreOwner::Acquire(store.get(), Fast(), &owner, &note).ok());
  EXPECT_NE(note.find("took over"), std::string::npos) << note;
  EXPECT_NE(note.find("host otherhost pid 4242"), std::string::npos) << note;
}

TEST(StoreOwner, ATakeOverStopsTheFirstJobAtItsNextRefresh) {
  testing::TempDir dir;
  auto store = Open(dir.path());
  std::unique_ptr<StoreOwner> owner;
  ASSERT_TRUE(StoreOwner::Acquire(store.get(), Fast(), &owner).ok());
  ASSERT_TRUE(owner->Refresh().ok());  // still ours: the heartbeat is rewritten
  Plant(store.get(), "intruder", Now());
  const Status st = owner->Refresh();
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("another job took over"), std::string::npos) << st.ToString();
  owner.reset();  // not ours any more: the intruder's object stays
  std::string text;
  ASSERT_TRUE(store->Get(StoreOwner::kKey, &text).ok());
  EXPECT_NE(text.find("token=intruder"), std::string::npos);
}

// After an S3 outage killed the job, its rerun on the same host found the dead job's owner object with a fresh
// heartbeat and was refused for ttl_s as "in use" by a pid that no longer exists.
TEST(StoreOwner, AFreshOwnerWhosePidIsGoneFromThisHostIsTakenOverAtOnce) {
  testing::TempDir dir;
  auto store = Open(dir.path());
  const std::string dead = std::to_string(DeadPid());
  const std::string text =
      "token=crashed\nhost=" + Host() + "\npid=" + dead + "\nstarted=1\nheartbeat=" + std::to_string(Now() - 5) + "\n";
  ASSERT_TRUE(store->Put(StoreOwner::kKey, text.data(), text.size()).ok());
  std::unique_ptr<StoreOwner> owner;
  std::string note;
  const Status st = StoreOwner::Acquire(store.get(), Fast(), &owner, &note);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(note.find("pid " + dead), std::string::npos) << note;
  EXPECT_NE(note.find("no longer exists on this host"), std::string::npos) << note;

  // A live pid of this host (ours) with a fresh heartbeat is still a live job.
  std::unique_ptr<StoreOwner> second;
  EXPECT_EQ(StoreOwner::Acquire(store.get(), Fast(), &second).code(), Status::Code::kInvalidArgument);
}

// Two jobs with different run dirs and one file:// checkpoint.url: the second is refused naming the first.
TEST(StoreOwner, ALocalRootIsLockedAndASecondJobIsRefusedNamingTheHolder) {
  testing::TempDir dir;
  auto store = Open("file://" + dir.path());
  std::unique_ptr<StoreOwner> first, second;
  StoreOwner::Options o;  // the defaults: a file lock for a local root
  ASSERT_TRUE(StoreOwner::Acquire(store.get(), o, &first).ok());
  EXPECT_TRUE(first->Refresh().ok());  // still in place: nothing to do
  EXPECT_FALSE(first->Due());
  const std::string lock = dir.path() + "/" + StoreOwner::kKey;
  EXPECT_NE(testing::ReadFile(lock).find("pid=" + std::to_string(getpid())), std::string::npos);

  const Status st = StoreOwner::Acquire(store.get(), o, &second);
  ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("checkpoint.url file://" + dir.path() + " is in use by another dtrain job"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("pid=" + std::to_string(getpid())), std::string::npos) << st.message();
  EXPECT_EQ(second, nullptr);

  first.reset();  // a clean end removes the lock file
  EXPECT_NE(access(lock.c_str(), F_OK), 0);
  ASSERT_TRUE(StoreOwner::Acquire(store.get(), o, &second).ok());
}

// checkpoint.overwrite moves a whole local root aside after the owner was taken: the lock went with it, and the root
// recreated in its place was unguarded. The first Refresh() (Due at the first step) locks the new root.
TEST(StoreOwner, ALocalRootMovedAwayIsLockedAgainAtTheFirstRefresh) {
  testing::TempDir dir;
  const std::string root = dir.path() + "/ckpt";
  auto store = Open("file://" + root);
  std::unique_ptr<StoreOwner> owner, second;
  ASSERT_TRUE(StoreOwner::Acquire(store.get(), StoreOwner::Options(), &owner).ok());
  ASSERT_EQ(rename(root.c_str(), (root + ".overwritten-1").c_str()), 0);
  ASSERT_TRUE(owner->Due());
  ASSERT_TRUE(owner->Refresh().ok());
  EXPECT_FALSE(owner->Due());
  EXPECT_NE(testing::ReadFile(root + "/" + StoreOwner::kKey).find("pid=" + std::to_string(getpid())),
            std::string::npos);
  EXPECT_EQ(StoreOwner::Acquire(store.get(), StoreOwner::Options(), &second).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(testing::ReadFile(root + ".overwritten-1/" + StoreOwner::kKey), "");  // names no holder
  owner.reset();
  EXPECT_NE(access((root + "/" + StoreOwner::kKey).c_str(), F_OK), 0);
}

}  // namespace
}  // namespace dtrain::runtime
