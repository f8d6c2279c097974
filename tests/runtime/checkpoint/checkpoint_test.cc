// CheckpointManager over the file:// store: manifest round trip, CRC32C of files, corrupt and partial
// checkpoints skipped, retention; CheckpointWriter's one-in-flight contract.

#include "runtime/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "runtime/checkpoint/checkpoint_writer.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::TempDir;

std::unique_ptr<CheckpointManager> OpenManager(const std::string& dir, int64_t keep_last = 3, int64_t keep_every = 0) {
  CheckpointOptions o;
  o.keep_last = keep_last;
  o.keep_every = keep_every;
  std::unique_ptr<CheckpointManager> m;
  const Status st = CheckpointManager::Open("file://" + dir, {}, o, &m);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return m;
}

// Saves step `step` with params = [step, step + 1, ...] (4 floats) and one state file.
void SaveStep(CheckpointManager* m, int64_t step) {
  std::vector<float> params = {float(step), float(step + 1), float(step + 2), float(step + 3)};
  std::vector<float> state = {0.5f * step, 1.5f};
  proto::CheckpointManifest man;
  man.set_step(step);
  man.set_world_size(2);
  man.set_optimizer_step(step);
  man.mutable_data()->set_epoch(1);
  man.mutable_data()->set_samples_in_epoch(step * 128);
  man.set_config_yaml("train:\n  seed: 7\n");
  const Status st = m->Save(
      man, {{"params.bin", params.data(), params.size() * 4, 4}, {"exp_avg.bin", state.data(), state.size() * 4, 2}});
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::vector<int64_t> Steps(CheckpointManager* m) {
  std::vector<CheckpointEntry> entries;
  EXPECT_TRUE(m->List(&entries).ok());
  std::vector<int64_t> steps;
  for (const auto& e : entries) steps.push_back(e.step);
  return steps;
}

TEST(CheckpointManager, StepDirNames) {
  EXPECT_EQ(CheckpointManager::StepDir(123), "step-00000123");
  int64_t s = 0;
  EXPECT_TRUE(CheckpointManager::ParseStepDir("step-00000123", &s));
  EXPECT_EQ(s, 123);
  EXPECT_TRUE(CheckpointManager::ParseStepDir("step-123456789", &s));
  EXPECT_EQ(s, 123456789);
  EXPECT_FALSE(CheckpointManager::ParseStepDir("step-", &s));
  EXPECT_FALSE(CheckpointManager::ParseStepDir("step-12a", &s));
  EXPECT_FALSE(CheckpointManager::ParseStepDir("latest", &s));
}

TEST(CheckpointManager, SaveLoadRoundTripWithManifestLastAndLatest) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  SaveStep(m.get(), 40);
  LoadedCheckpoint ck;
  ASSERT_TRUE(m->Load(40, &ck).ok());
  EXPECT_EQ(ck.dir, "step-00000040");
  EXPECT_EQ(ck.manifest.step(), 40);
  EXPECT_EQ(ck.manifest.world_size(), 2);
  EXPECT_EQ(ck.manifest.data().samples_in_epoch(), 40 * 128);
  EXPECT_EQ(ck.manifest.config_yaml(), "train:\n  seed: 7\n");
  ASSERT_EQ(ck.manifest.files_size(), 2);
  EXPECT_EQ(ck.manifest.files(0).name(), "params.bin");
  EXPECT_EQ(ck.manifest.files(0).size(), 16u);
  std::vector<float> p(4);
  ASSERT_EQ(ck.files["params.bin"].size(), 16u);
  std::memcpy(p.data(), ck.files["params.bin"].data(), 16);
  EXPECT_EQ(p, (std::vector<float>{40, 41, 42, 43}));
  EXPECT_EQ(ck.manifest.files(0).crc32c(), ::dtrain::Crc32c(ck.files["params.bin"].data(), 16));
  EXPECT_EQ(testing::ReadFile(dir.path() + "/latest"), "step-00000040\n");
  EXPECT_EQ(m->Load(41, &ck).code(), Status::Code::kNotFound);
}

TEST(CheckpointManager, FlippedByteIsDetectedAndThePreviousCheckpointUsed) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  SaveStep(m.get(), 10);
  SaveStep(m.get(), 20);
  const std::string path = dir.path() + "/step-00000020/params.bin";
  std::string bytes = testing::ReadFile(path);
  ASSERT_EQ(bytes.size(), 16u);
  bytes[5] ^= 0x01;
  testing::WriteFile(path, bytes);
  LoadedCheckpoint ck;
  EXPECT_EQ(m->Load(20, &ck).code(), Status::Code::kDataLoss);
  std::vector<std::string> skipped;
  ASSERT_TRUE(m->LoadLatest(&ck, &skipped).ok());
  EXPECT_EQ(ck.manifest.step(), 10);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-00000020/params.bin: CRC32C"), std::string::npos) << skipped[0];
  // A truncated file is named too.
  testing::WriteFile(path, bytes.substr(0, 12));
  skipped.clear();
  ASSERT_TRUE(m->LoadLatest(&ck, &skipped).ok());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("12 bytes, the manifest says 16"), std::string::npos) << skipped[0];
}

TEST(CheckpointManager, PartialDirectoryIsIgnoredThenCleanedUpByRetention) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  SaveStep(m.get(), 10);
  // A save killed before its manifest: data files only, at steps 20 (older than the next save) and 90.
  const float junk[4] = {1, 2, 3, 4};
  ASSERT_TRUE(m->store().Put("step-00000020/params.bin", junk, sizeof(junk)).ok());
  ASSERT_TRUE(m->store().Put("step-00000090/params.bin", junk, sizeof(junk)).ok());
  LoadedCheckpoint ck;
  std::vector<std::string> skipped;
  ASSERT_TRUE(m->LoadLatest(&ck, &skipped).ok());
  EXPECT_EQ(ck.manifest.step(), 10);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("step-00000090: no manifest.pb"), std::string::npos) << skipped[0];
  SaveStep(m.get(), 30);  // retention: the partial step 20 is older than the newest valid (30): deleted
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{10, 30, 90}));
  SaveStep(m.get(), 100);
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{10, 30, 100}));
}

TEST(CheckpointManager, RetentionKeepsLastNPlusEveryMth) {
  TempDir dir;
  auto m = OpenManager(dir.path(), /*keep_last=*/2, /*keep_every=*/4);
  for (int64_t s = 1; s <= 10; ++s) SaveStep(m.get(), s);
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{4, 8, 9, 10}));
  auto plain = OpenManager(dir.path(), /*keep_last=*/1, /*keep_every=*/0);
  SaveStep(plain.get(), 11);
  EXPECT_EQ(Steps(plain.get()), (std::vector<int64_t>{11}));
  LoadedCheckpoint ck;
  EXPECT_EQ(plain->Load(10, &ck).code(), Status::Code::kNotFound);
}

TEST(CheckpointManager, EmptyStoreIsNotFound) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  LoadedCheckpoint ck;
  EXPECT_EQ(m->LoadLatest(&ck).code(), Status::Code::kNotFound);
}

TEST(CheckpointWriter, OneJobInFlightErrorsSurfaceAtWait) {
  std::mutex gate;
  int ran = 0;
  CheckpointWriter w;  // after what its jobs touch: its destructor waits for them
  gate.lock();
  ASSERT_TRUE(w.Submit([&] {
                 std::lock_guard<std::mutex> g(gate);  // blocks until the test opens the gate
                 ++ran;
                 return Status::IoError("disk full");
               }).ok());
  EXPECT_TRUE(w.busy());
  EXPECT_EQ(w.Submit([] { return Status::OK(); }).code(), Status::Code::kFailedPrecondition);
  gate.unlock();
  double waited = -1;
  const Status st = w.Wait(&waited);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_GE(waited, 0);
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(w.Wait().ok());  // the error is reported once
  ASSERT_TRUE(w.Submit([&] {
                 ++ran;
                 return Status::OK();
               }).ok());
  // The destructor waits for the job in flight.
}

}  // namespace
}  // namespace dtrain::runtime
