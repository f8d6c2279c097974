// The checkpoint-phase fault walk (docs/faults.md): for each phase of a save, a crash there
// (DTRAIN_FAULT=...,action=kill_in_ckpt,phase=P) and, separately, a storage failure or partial write
// there (DTRAIN_STORAGE_FAULT), then a relaunch. Checked each time: nothing torn is loaded (a partial
// checkpoint is skipped with a warning naming it and why), training resumes from the newest complete
// checkpoint and ends bit-identical to an uninterrupted run, and the failing run's error names the
// operation and the key. In-process tests first (phase order, manifest truncation), then the real
// binary (CPU, Fashion-MNIST CI config).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/sealed_bytes.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/fault_injection.h"
#include "storage/fault_storage.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::ProcessResult;
using testing::RunCommand;
using testing::TempDir;

// ---- in process -------------------------------------------------------------------------------

proto::CheckpointManifest Manifest(int64_t step) {
  proto::CheckpointManifest m;
  m.set_format_version(1);
  m.set_step(step);
  m.set_world_size(1);
  m.set_optimizer("sgd");
  m.set_config_yaml("train:\n  seed: 1\n");
  return m;
}

const float kParams[4] = {1, 2, 3, 4};
const float kState[4] = {5, 6, 7, 8};
std::vector<CheckpointBlob> Blobs() { return {{"params.bin", kParams, 16, 4}, {"momentum.bin", kState, 16, 4}}; }

std::unique_ptr<CheckpointManager> OpenManager(const std::string& url, CheckpointOptions o) {
  std::unique_ptr<CheckpointManager> m;
  EXPECT_TRUE(CheckpointManager::Open(url, storage::StorageOptions{}, o, &m).ok());
  return m;
}

TEST(CheckpointPhases, NamesParseAndTheKillSpecTakesAPhase) {
  CheckpointPhase p;
  for (const char* name : {"snapshot", "data", "before_manifest", "manifest", "latest", "retention"}) {
    ASSERT_TRUE(ParseCheckpointPhase(name, &p)) << name;
    EXPECT_STREQ(CheckpointPhaseName(p), name);
  }
  EXPECT_FALSE(ParseCheckpointPhase("upload", &p));
  FaultInjector f;
  ASSERT_TRUE(FaultInjector::Parse("step=20,action=kill_in_ckpt,phase=latest", &f).ok());
  EXPECT_TRUE(f.AtCheckpointWrite(0, 20, CheckpointPhase::kManifest).ok());  // another phase: no effect
  EXPECT_TRUE(f.AtCheckpointWrite(0, 10, CheckpointPhase::kLatest).ok());    // another step: no effect
  const Status bad = FaultInjector::Parse("step=20,action=kill_in_ckpt,phase=upload", &f);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("phase=snapshot|data|before_manifest|manifest|latest|retention"), std::string::npos);
  EXPECT_EQ(FaultInjector::Parse("step=2,action=error,phase=data", &f).code(), Status::Code::kInvalidArgument);
}

// The hook runs at each documented point, in order; retention's only when it deletes something.
TEST(CheckpointPhases, HookRunsAtEachPhaseInOrder) {
  TempDir dir;
  std::vector<std::string> seen;
  CheckpointOptions o;
  o.keep_last = 1;
  o.at_phase = [&seen](CheckpointPhase p, int64_t step) {
    seen.push_back(std::to_string(step) + ":" + CheckpointPhaseName(p));
    return Status::OK();
  };
  auto m = OpenManager(dir.path(), o);
  ASSERT_TRUE(m->Save(Manifest(10), Blobs()).ok());
  ASSERT_TRUE(m->Save(Manifest(20), Blobs()).ok());
  const std::vector<std::string> want = {
      "10:snapshot", "10:data", "10:before_manifest", "10:manifest", "10:latest",  // nothing to delete
      "20:snapshot", "20:data", "20:before_manifest", "20:manifest", "20:latest", "20:retention"};
  EXPECT_EQ(seen, want);
}

// A save that stops at each phase (the hook's error stands in for a crash): what the store holds,
// and what LoadLatest makes of it.
TEST(CheckpointPhases, ASaveStoppedAtEachPhaseLoadsTheNewestCompleteCheckpoint) {
  struct Want {
    CheckpointPhase phase;
    int64_t loads;
    const char* skipped;  // "" = nothing skipped
  };
  const Want walk[] = {
      {CheckpointPhase::kSnapshot, 10, ""},
      {CheckpointPhase::kData, 10, "step-00000020: no manifest.pb (an incomplete save)"},
      {CheckpointPhase::kBeforeManifest, 10, "step-00000020: no manifest.pb (an incomplete save)"},
      {CheckpointPhase::kManifest, 20, ""},
      {CheckpointPhase::kLatest, 20, ""},
      {CheckpointPhase::kRetention, 20, ""},
  };
  for (const Want& w : walk) {
    SCOPED_TRACE(CheckpointPhaseName(w.phase));
    TempDir dir;
    CheckpointOptions o;
    o.keep_last = 1;
    o.at_phase = [&w](CheckpointPhase p, int64_t step) {
      return step == 20 && p == w.phase ? Status::Aborted("stop") : Status::OK();
    };
    auto m = OpenManager(dir.path(), o);
    ASSERT_TRUE(m->Save(Manifest(10), Blobs()).ok());
    EXPECT_EQ(m->Save(Manifest(20), Blobs()).code(), Status::Code::kAborted);
    LoadedCheckpoint ck;
    std::vector<std::string> skipped;
    auto fresh = OpenManager(dir.path(), CheckpointOptions{});
    const Status loaded = fresh->LoadLatest(&ck, &skipped);
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    EXPECT_EQ(ck.manifest.step(), w.loads);
    if (*w.skipped == '\0') {
      EXPECT_TRUE(skipped.empty()) << skipped[0];
    } else {
      ASSERT_EQ(skipped.size(), 1u);
      EXPECT_EQ(skipped[0], std::string("step-00000020: ") + w.skipped);  // "<dir>: <why>"
    }
    std::vector<CheckpointEntry> entries;
    ASSERT_TRUE(fresh->List(&entries).ok());
    if (w.phase == CheckpointPhase::kRetention) {  // step 10 lost its manifest first: a partial directory
      ASSERT_EQ(entries.size(), 2u);
      EXPECT_FALSE(entries[0].has_manifest);
      EXPECT_EQ(fresh->Load(10, &ck).code(), Status::Code::kNotFound);
    }
  }
}

// A manifest cut short is never loaded. As Save writes it (sealed, core/sealed_bytes.h) every cut is
// DataLoss: a checksum mismatch, or inside the header a cut-short or unparsable file. A bare manifest (an
// older dtrain's): mid-field it does not parse; cut exactly before its last field it does parse (protobuf
// cannot tell), and the missing created_unix_ms gives it away.
TEST(CheckpointPhases, TruncatedManifestIsRejectedAtAnyLength) {
  TempDir dir;
  auto m = OpenManager(dir.path(), CheckpointOptions{});
  ASSERT_TRUE(m->Save(Manifest(10), Blobs()).ok());
  std::string sealed;
  ASSERT_TRUE(m->store().Get("step-00000010/manifest.pb", &sealed).ok());
  ASSERT_GT(sealed.size(), kSealHeaderBytes);
  size_t mismatch = 0;
  for (size_t cut = 0; cut < sealed.size(); ++cut) {
    ASSERT_TRUE(m->store().Put("step-00000010/manifest.pb", sealed.data(), cut).ok());
    LoadedCheckpoint ck;
    const Status st = m->Load(10, &ck);
    ASSERT_EQ(st.code(), Status::Code::kDataLoss) << "cut at " << cut << ": " << st.ToString();
    mismatch += st.message().find("checksum mismatch") != std::string::npos;
  }
  EXPECT_EQ(mismatch, sealed.size() - kSealHeaderBytes);
  const std::string bytes = sealed.substr(kSealHeaderBytes);
  proto::CheckpointManifest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_GT(parsed.created_unix_ms(), 0);  // Save filled it in
  parsed.clear_created_unix_ms();
  const size_t boundary = parsed.ByteSizeLong();
  ASSERT_LT(boundary, bytes.size());
  size_t incomplete = 0, unparsable = 0;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    ASSERT_TRUE(m->store().Put("step-00000010/manifest.pb", bytes.data(), cut).ok());
    LoadedCheckpoint ck;
    const Status st = m->Load(10, &ck);
    ASSERT_EQ(st.code(), Status::Code::kDataLoss) << "cut at " << cut << ": " << st.ToString();
    incomplete += st.message().find("incomplete") != std::string::npos;
    unparsable += st.message().find("does not parse") != std::string::npos;
  }
  EXPECT_EQ(incomplete + unparsable, bytes.size());
  EXPECT_GE(incomplete, 1u);  // at least the cut at `boundary`
  ASSERT_TRUE(m->store().Put("step-00000010/manifest.pb", bytes.data(), boundary).ok());
  LoadedCheckpoint ck;
  EXPECT_NE(m->Load(10, &ck).message().find("step-00000010/manifest.pb: incomplete (" + std::to_string(boundary) +
                                            " bytes, no created_unix_ms, the last field): truncated"),
            std::string::npos);
}

// Storage faults at each storage operation of a save, in process: the error names the operation and
// the key; a partial write that "succeeded" is caught by the manifest's size and CRC32C.
TEST(CheckpointPhases, StorageFaultsNameTheOperationAndKey) {
  const struct {
    const char* spec;
    int64_t keep_last;
    const char* error;  // in Save's error ("" = Save succeeds)
    int64_t loads;
    const char* skipped;
  } walk[] = {
      {"op=put,key=step-00000020/momentum.bin,action=error", 2, "put {}/step-00000020/momentum.bin: injected", 10,
       "step-00000020: no manifest.pb"},
      {"op=put,key=step-00000020/params.bin,action=partial,bytes=7", 2, "", 10,
       "step-00000020/params.bin: 7 bytes, the manifest says 16"},
      {"op=put,key=step-00000020/manifest.pb,action=error", 2, "put {}/step-00000020/manifest.pb: injected", 10,
       "step-00000020: no manifest.pb"},
      {"op=put,key=step-00000020/manifest.pb,action=partial,bytes=9", 2, "", 10, "step-00000020/manifest.pb: "},
      {"op=put,key=latest,nth=2,action=error", 2, "put {}/latest: injected", 20, ""},
      {"op=put,key=latest,nth=2,action=partial,bytes=3", 2, "", 20, ""},
      {"op=delete,action=error", 1,
       "step-00000020 is complete, but retention failed: delete {}/step-00000010/manifest.pb: injected", 20, ""},
  };
  for (const auto& w : walk) {
    SCOPED_TRACE(w.spec);
    TempDir dir;
    CheckpointOptions o;
    o.keep_last = w.keep_last;  // 2 keeps step 10 next to a torn step 20; 1 makes the save of 20 delete it
    setenv("DTRAIN_STORAGE_FAULT", w.spec, 1);
    auto m = OpenManager(dir.path(), o);
    unsetenv("DTRAIN_STORAGE_FAULT");
    ASSERT_TRUE(m->Save(Manifest(10), Blobs()).ok());
    const Status st = m->Save(Manifest(20), Blobs());
    std::string error = w.error;
    if (const size_t p = error.find("{}"); p != std::string::npos) error.replace(p, 2, dir.path());
    if (error.empty()) {
      EXPECT_TRUE(st.ok()) << st.ToString();
    } else {
      EXPECT_EQ(st.code(), Status::Code::kIoError);
      EXPECT_NE(st.message().find(error), std::string::npos) << st.message();
    }
    LoadedCheckpoint ck;
    std::vector<std::string> skipped;
    auto fresh = OpenManager(dir.path(), CheckpointOptions{});
    const Status loaded = fresh->LoadLatest(&ck, &skipped);
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    EXPECT_EQ(ck.manifest.step(), w.loads);
    if (*w.skipped == '\0') {
      EXPECT_TRUE(skipped.empty()) << skipped[0];
    } else {
      ASSERT_EQ(skipped.size(), 1u);
      EXPECT_NE(skipped[0].find(w.skipped), std::string::npos) << skipped[0];
    }
  }
}

// ---- the real binary --------------------------------------------------------------------------

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
// 30 steps, a checkpoint every 10 (the one of step 30 at the end), the newest 2 kept.
const std::string kArgs =
    " --set train.device=cpu --set train.eval=false --set train.log_every=10 --set train.max_steps=30"
    " --set checkpoint.every_steps=10 --set checkpoint.keep_last=2";

struct WalkCase {
  std::string name;
  std::string env;      // the fault(s), for the first run only
  std::string args;     // extra flags for both runs
  bool killed;          // the first run dies by SIGKILL (else exits 1)
  std::string error;    // in the first run's output; {} = the checkpoint directory
  int64_t resumes_at;   // the step the relaunch resumes from
  std::string skipped;  // in the relaunch's warning "<dir> skipped: ..." ("" = none)
};

std::string Fill(std::string s, const std::string& dir) {
  for (size_t p; (p = s.find("{}")) != std::string::npos;) s.replace(p, 2, dir);
  return s;
}

// Every case faults the save of step 20 (the asynchronous one between the saves of 10 and 30). A
// partial write reports success, so those runs also fail at step 25 (DTRAIN_FAULT=...action=error)
// to relaunch from what the lie left behind.
std::vector<WalkCase> Cases() {
  const std::string kill = "DTRAIN_FAULT=step=20,action=kill_in_ckpt,phase=";
  const std::string stop = " DTRAIN_FAULT=step=25,action=error";
  const std::string fault = "DTRAIN_STORAGE_FAULT=";
  const std::string injected = ": injected storage fault";
  const std::string no_manifest = "step-00000020 skipped: step-00000020: no manifest.pb (an incomplete save)";
  const std::string keep1 = " --set checkpoint.keep_last=1";  // the save of 20 deletes step 10
  return {
      {"kill/snapshot", kill + "snapshot", "", true, "phase snapshot", 10, ""},
      {"kill/data", kill + "data", "", true, "phase data", 10, no_manifest},
      {"kill/before_manifest", kill + "before_manifest", "", true, "phase before_manifest", 10, no_manifest},
      {"kill/manifest", kill + "manifest", "", true, "phase manifest", 20, ""},
      {"kill/latest", kill + "latest", "", true, "phase latest", 20, ""},
      {"kill/retention", kill + "retention", keep1, true, "phase retention", 20, ""},
      {"error/data", fault + "op=put,key=step-00000020/,nth=2,action=error", "", false, "put {}/step-00000020/", 10,
       no_manifest},
      {"partial/data", fault + "op=put,key=step-00000020/params.bin,action=partial,bytes=100" + stop, "", false,
       "injected fault", 10, "step-00000020 skipped: step-00000020/params.bin: 100 bytes, the manifest says"},
      {"error/manifest", fault + "op=put,key=*/manifest.pb,nth=2,action=error", "", false,
       "put {}/step-00000020/manifest.pb" + injected, 10, no_manifest},
      {"partial/manifest", fault + "op=put,key=step-00000020/manifest.pb,action=partial,bytes=40" + stop, "", false,
       "injected fault", 10, "/step-00000020/manifest.pb: checksum mismatch"},
      {"error/latest", fault + "op=put,key=latest,nth=2,action=error", "", false, "put {}/latest" + injected, 20, ""},
      {"partial/latest", fault + "op=put,key=latest,nth=2,action=partial,bytes=4" + stop, "", false, "injected fault",
       20, ""},
      // (key=step-*: the start's storage preflight deletes its probe object too, and must succeed.)
      {"error/retention", fault + "op=delete,key=step-*,action=error", keep1, false,
       "step-00000020 is complete, but retention failed: delete {}/step-00000010/manifest.pb" + injected, 20, ""},
  };
}

TEST(CheckpointFaultWalkE2E, EveryPhaseKilledOrFaultedResumesBitIdentical) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  const std::string train = testing::DtrainBin() + " train " + kCiConfig + kArgs;
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult ref = RunCommand(train + " --set run.dir=" + d + "/ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::vector<WalkCase> cases = Cases();
  // Two cases at a time (one per core); each writes only its own run directory.
  std::atomic<size_t> next{0};
  std::vector<ProcessResult> first(cases.size()), second(cases.size());
  auto worker = [&] {
    for (size_t i; (i = next++) < cases.size();) {
      const std::string run = d + "/" + std::to_string(i);
      first[i] = RunCommand(cases[i].env + " " + train + cases[i].args + " --set run.dir=" + run);
      second[i] = RunCommand(train + cases[i].args + " --set run.dir=" + run);
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    const WalkCase& c = cases[i];
    SCOPED_TRACE(c.name + " (" + c.env + ")");
    const std::string run = d + "/" + std::to_string(i), ck = run + "/checkpoints";
    if (c.killed) {
      EXPECT_TRUE(first[i].signal == 9 || first[i].exit_code == 137) << first[i].output;
    } else {
      EXPECT_EQ(first[i].exit_code, 1) << first[i].output;
    }
    EXPECT_NE(first[i].output.find(Fill(c.error, ck)), std::string::npos) << first[i].output;
    ASSERT_EQ(second[i].exit_code, 0) << second[i].output;
    const std::string resumed = "resumed from " + ck + "/" + CheckpointManager::StepDir(c.resumes_at) + ": step " +
                                std::to_string(c.resumes_at);
    EXPECT_NE(second[i].output.find(resumed), std::string::npos) << second[i].output;
    if (c.skipped.empty()) {
      EXPECT_EQ(second[i].output.find(" skipped: "), std::string::npos) << second[i].output;
    } else {
      EXPECT_NE(second[i].output.find(c.skipped), std::string::npos) << second[i].output;
    }
    EXPECT_EQ(testing::MaxSafetensorsDiff(d + "/ref/final.safetensors", run + "/final.safetensors"), 0.0);
  }
  std::printf("%zu cases, %zu runs in %.1f s\n", cases.size(), 2 * cases.size() + 1,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace dtrain::runtime
