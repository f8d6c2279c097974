// StoreOwner on a real file:// store: a live owner refuses a second job, a stale one is taken over, a take-over
// stops the first job at its next refresh, and a clean end leaves no owner object.

#include "runtime/checkpoint/store_owner.h"

#include <gtest/gtest.h>

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
  return o;
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

}  // namespace
}  // namespace dtrain::runtime
