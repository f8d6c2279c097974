// PlanResume and lineage retention (runtime/checkpoint/resume_plan.h, checkpoint.h) over a real
// file:// store: resume: never refuses a directory holding checkpoints (and moves them aside with
// overwrite), auto refuses when every checkpoint fails (and deletes nothing), retention never
// deletes another lineage's checkpoints or the newest save; sealed manifests turn a flipped bit into
// DataLoss naming the file, and a bare pre-seal manifest still loads.

#include "runtime/checkpoint/resume_plan.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/sealed_bytes.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::unique_ptr<CheckpointManager> OpenManager(const std::string& dir, int64_t keep_last = 2) {
  CheckpointOptions o;
  o.keep_last = keep_last;
  std::unique_ptr<CheckpointManager> m;
  EXPECT_TRUE(CheckpointManager::Open(dir, {}, o, &m).ok());
  return m;
}

void SaveStep(CheckpointManager* m, int64_t step) {
  std::vector<float> params = {float(step), 1.f, 2.f, 3.f};
  proto::CheckpointManifest man;
  man.set_step(step);
  const Status st = m->Save(man, {{"params.bin", params.data(), params.size() * 4, 4}});
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::vector<int64_t> Steps(CheckpointManager* m) {
  std::vector<CheckpointEntry> entries;
  EXPECT_TRUE(m->List(&entries).ok());
  std::vector<int64_t> steps;
  for (const auto& e : entries) steps.push_back(e.step);
  return steps;
}

// An object store that is not a local directory (as s3:// is not): overwrite must delete, not rename.
class MemStorage : public storage::Storage {
 public:
  Status Put(const std::string& key, const void* data, size_t size) override {
    objects_[key].assign(static_cast<const char*>(data), size);
    return Status::OK();
  }
  Status Get(const std::string& key, std::string* out) override {
    const auto it = objects_.find(key);
    if (it == objects_.end()) return Status::NotFound(url_ + "/" + key);
    *out = it->second;
    return Status::OK();
  }
  Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) override {
    DT_RETURN_IF_ERROR(Get(key, out));
    *out = offset < out->size() ? out->substr(offset, size) : std::string();
    return Status::OK();
  }
  Status Head(const std::string& key, storage::ObjectInfo* out) override {
    std::string data;
    DT_RETURN_IF_ERROR(Get(key, &data));
    *out = {key, data.size()};
    return Status::OK();
  }
  Status List(const std::string& prefix, std::vector<storage::ObjectInfo>* out) override {
    out->clear();
    for (const auto& [key, data] : objects_) {
      if (key.compare(0, prefix.size(), prefix) == 0) out->push_back({key, data.size()});
    }
    return Status::OK();
  }
  Status Delete(const std::string& key) override {
    objects_.erase(key);
    return Status::OK();
  }
  const std::string& url() const override { return url_; }
  size_t size() const { return objects_.size(); }

 private:
  std::string url_ = "mem://bucket/ckpt";
  std::map<std::string, std::string> objects_;
};

std::vector<std::string> Siblings(const std::string& parent, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(parent.c_str());
  while (const dirent* e = readdir(d)) {
    if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

TEST(ResumePlan, NeverRefusesExistingCheckpointsUnlessOverwriteMovesThemAside) {
  TempDir dir;
  const std::string ck = dir.path() + "/ckpt";
  auto m = OpenManager(ck);
  m->set_run_id("old");
  SaveStep(m.get(), 100);
  SaveStep(m.get(), 200);

  ResumePlan plan;
  Status st = PlanResume(m.get(), {"never", false, true}, &plan);
  ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("newest step-00000200"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("checkpoint.resume: auto"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--overwrite"), std::string::npos) << st.message();
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{100, 200}));  // nothing touched

  ASSERT_TRUE(PlanResume(m.get(), {"never", true, true}, &plan).ok());
  EXPECT_FALSE(plan.resume);
  EXPECT_EQ(plan.run_id.size(), 16u);
  EXPECT_NE(plan.note.find("moved the 2 old step directories of " + ck + " aside to " + ck + ".overwritten-"),
            std::string::npos)
      << plan.note;
  EXPECT_TRUE(Steps(m.get()).empty());
  const auto aside = Siblings(dir.path(), "ckpt.overwritten-");
  ASSERT_EQ(aside.size(), 1u);
  auto old = OpenManager(dir.path() + "/" + aside[0]);
  EXPECT_EQ(Steps(old.get()), (std::vector<int64_t>{100, 200}));  // kept whole, still loadable
  LoadedCheckpoint loaded;
  EXPECT_TRUE(old->Load(200, &loaded).ok());

  // The fresh run saves into the same (re-created) directory; `latest` names its save.
  m->set_run_id(plan.run_id);
  SaveStep(m.get(), 10);
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000010\n");
}

TEST(ResumePlan, OverwriteOnAnObjectStoreDeletesTheOldCheckpointsFirstAndOnlyOnTheWriter) {
  auto owned = std::make_unique<MemStorage>();
  MemStorage* store = owned.get();
  CheckpointManager m(std::move(owned), CheckpointOptions());
  SaveStep(&m, 100);
  SaveStep(&m, 200);
  ASSERT_EQ(store->size(), 5u);  // 2 x (params.bin, manifest.pb) + latest
  ResumePlan plan;
  ASSERT_TRUE(PlanResume(&m, {"never", true, /*writer=*/false}, &plan).ok());
  EXPECT_EQ(plan.note, "");
  EXPECT_EQ(store->size(), 5u);  // another rank: decides the same, touches nothing
  ASSERT_TRUE(PlanResume(&m, {"never", true, /*writer=*/true}, &plan).ok());
  EXPECT_EQ(plan.note, "checkpoint.overwrite: deleted the 2 old step directories of mem://bucket/ckpt");
  EXPECT_EQ(store->size(), 0u);
}

// `--resume 10 --overwrite` twice within one second (a fast machine, a script): each set of newer checkpoints goes
// aside under a name of its own; the second move must not fail on the first one's directory.
TEST(ResumePlan, OlderStepWithOverwriteTwiceInOneSecondMovesEachNewerSetAsideUnderItsOwnName) {
  TempDir dir;
  const std::string ck = dir.path() + "/ckpt";
  auto m = OpenManager(ck, /*keep_last=*/5);
  m->set_run_id("a");
  for (int64_t step : {10, 20, 30}) SaveStep(m.get(), step);
  ResumePlan plan;
  const Status refused = PlanResume(m.get(), {"10", false, true}, &plan);
  ASSERT_EQ(refused.code(), Status::Code::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("2 newer checkpoint(s) (step-00000020, step-00000030)"), std::string::npos)
      << refused.message();
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{10, 20, 30}));
  for (int round = 0; round < 2; ++round) {
    const Status st = PlanResume(m.get(), {"10", true, true}, &plan);
    ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.ToString();
    EXPECT_TRUE(plan.resume);
    EXPECT_EQ(plan.loaded.manifest.step(), 10);
    EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{10}));
    EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000010\n");
    for (int64_t step : {20, 30}) SaveStep(m.get(), step);  // the run trains on and saves them again
  }
  const auto aside = Siblings(dir.path(), "ckpt.overwritten-");
  ASSERT_EQ(aside.size(), 2u);
  for (const std::string& a : aside) {
    auto old = OpenManager(dir.path() + "/" + a);
    EXPECT_EQ(Steps(old.get()), (std::vector<int64_t>{20, 30})) << a;
  }
}

// The same on an object store: the newer checkpoints are copied under overwritten-<stamp>/ first (never only deleted),
// and `resume` of a step that was never saved says so, naming what exists.
TEST(ResumePlan, OlderStepWithOverwriteOnAnObjectStoreCopiesTheNewerOnesAside) {
  auto owned = std::make_unique<MemStorage>();
  MemStorage* store = owned.get();
  CheckpointManager m(std::move(owned), CheckpointOptions());
  for (int64_t step : {10, 20}) SaveStep(&m, step);
  ResumePlan plan;
  const Status missing = PlanResume(&m, {"15", true, true}, &plan);
  EXPECT_EQ(missing.code(), Status::Code::kInvalidArgument) << missing.ToString();
  EXPECT_NE(missing.message().find("step 15 does not exist in mem://bucket/ckpt (its checkpoints: step-00000010, "
                                   "step-00000020)"),
            std::string::npos)
      << missing.message();
  ASSERT_TRUE(PlanResume(&m, {"10", true, true}, &plan).ok());
  EXPECT_EQ(Steps(&m), (std::vector<int64_t>{10}));
  std::vector<storage::ObjectInfo> aside;
  ASSERT_TRUE(store->List("overwritten-", &aside).ok());
  ASSERT_EQ(aside.size(), 2u);  // step-00000020's params.bin and manifest.pb
  EXPECT_NE(aside[0].key.find("/step-00000020/"), std::string::npos) << aside[0].key;
}

TEST(ResumePlan, AutoRefusesWhenEveryCheckpointFailsAndDeletesNothing) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  SaveStep(m.get(), 10);
  SaveStep(m.get(), 20);
  WriteFile(dir.path() + "/step-00000010/params.bin", "0123456789abcdeX");  // CRC32C mismatch
  std::string man = ReadFile(dir.path() + "/step-00000020/manifest.pb");
  man[man.size() - 1] ^= 0x01;  // one flipped bit in the manifest
  WriteFile(dir.path() + "/step-00000020/manifest.pb", man);

  ResumePlan plan;
  const Status st = PlanResume(m.get(), {"auto", false, true}, &plan);
  ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("none of the checkpoints"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("step-00000020: " + dir.path() + "/step-00000020/manifest.pb: checksum mismatch"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("step-00000010: step-00000010/params.bin: CRC32C"), std::string::npos) << st.message();
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{10, 20}));

  // Only partial directories (a first save killed): a fresh start, as before.
  TempDir fresh;
  auto f = OpenManager(fresh.path());
  WriteFile(fresh.path() + "/step-00000005/params.bin", "abcd");
  ASSERT_TRUE(PlanResume(f.get(), {"auto", false, true}, &plan).ok());
  EXPECT_FALSE(plan.resume);
}

TEST(ResumePlan, AutoResumesAndCarriesTheLineage) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  m->set_run_id("lineage-a");
  SaveStep(m.get(), 10);
  ResumePlan plan;
  ASSERT_TRUE(PlanResume(m.get(), {"auto", false, true}, &plan).ok());
  EXPECT_TRUE(plan.resume);
  EXPECT_EQ(plan.loaded.manifest.step(), 10);
  EXPECT_EQ(plan.run_id, "lineage-a");
  ASSERT_TRUE(PlanResume(m.get(), {"10", false, true}, &plan).ok());
  EXPECT_EQ(plan.run_id, "lineage-a");
  EXPECT_EQ(PlanResume(m.get(), {"sometimes", false, true}, &plan).code(), Status::Code::kInvalidArgument);
}

TEST(Retention, DeletesOnlyTheCurrentLineageAndNeverTheNewestSave) {
  TempDir dir;
  auto m = OpenManager(dir.path(), /*keep_last=*/1);
  m->set_run_id("old");
  SaveStep(m.get(), 300);
  SaveStep(m.get(), 400);  // keep_last 1: 300 goes
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{400}));
  // A new lineage saving below the old one's steps (the resume: never bug): its saves survive, the
  // old lineage's checkpoint too, and `latest` names the new save.
  m->set_run_id("new");
  SaveStep(m.get(), 50);
  SaveStep(m.get(), 60);
  EXPECT_EQ(Steps(m.get()), (std::vector<int64_t>{60, 400}));
  EXPECT_EQ(ReadFile(dir.path() + "/latest"), "step-00000060\n");
}

TEST(CheckpointManifestSeal, FlippedBitIsDataLossNamingTheFileAndBareManifestsStillLoad) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  SaveStep(m.get(), 7);
  const std::string path = dir.path() + "/step-00000007/manifest.pb";
  const std::string sealed = ReadFile(path);
  ASSERT_EQ(sealed.substr(0, 8), std::string(kSealMagic, 8));
  std::string bad = sealed;
  bad[20] ^= 0x10;
  WriteFile(path, bad);
  LoadedCheckpoint ck;
  Status st = m->Load(7, &ck);
  ASSERT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.message();

  WriteFile(path, sealed.substr(kSealHeaderBytes));  // as an older dtrain wrote it
  st = m->Load(7, &ck);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ck.manifest.step(), 7);
}

}  // namespace
}  // namespace dtrain::runtime
