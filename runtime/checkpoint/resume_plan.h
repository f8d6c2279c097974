#pragma once
// PlanResume: what a starting run does with the checkpoints it finds (docs/faults.md), decided in one
// place so that nothing saved is lost by accident.
//
//   checkpoint.resume   checkpoints in the store              outcome
//   auto                a valid one                           resume from the newest valid one
//   auto                none, or only partial directories     fresh start
//   auto                some, none verifies                   refuse (InvalidArgument: every checkpoint and
//                                                             why it fails); with overwrite: move them aside
//   never               none (partial directories only, too)  fresh start
//   never               some                                  refuse (InvalidArgument naming the newest and
//                                                             the two ways out); with overwrite: move aside
//   STEP                STEP's directory absent               refuse (InvalidArgument: the step does not exist,
//                                                             naming the checkpoints there)
//   STEP                newer checkpoints (manifests read)    refuse (InvalidArgument naming them: training on
//                                                             would replace them); with overwrite: move the newer
//                                                             ones aside, then resume from STEP
//   STEP                otherwise                             resume from STEP, or its load error
// "Move aside" (the writer rank only): a local store's directory is renamed to
// `<dir>.overwritten-<UTC yyyymmddThhmmssZ>`; an s3:// store's step directories and `latest` are deleted
// (manifest first). Moving newer checkpoints aside (STEP): a local store's step directories are renamed into
// `<dir>.overwritten-<stamp>/`, an object store's are copied under `overwritten-<stamp>/` in the same root and then
// deleted (manifest first); `latest` then names STEP. It happens before the first step, and is logged.
// The lineage (run_id) is the resumed checkpoint's, or a new random one at a fresh start; the caller
// hands it to CheckpointManager::set_run_id. Thread-safety: as the manager's Save (one caller).

#include <string>

#include "core/status.h"
#include "runtime/checkpoint/checkpoint.h"

namespace dtrain::runtime {

struct ResumeRequest {
  std::string resume = "auto";  // checkpoint.resume: auto | never | a step number
  bool overwrite = false;       // checkpoint.overwrite / --overwrite
  bool writer = false;          // this process moves old checkpoints aside (rank 0)
  LoadSink* sink = nullptr;  // where the loads put the files (CheckpointManager::Load); null: LoadedCheckpoint::files
};

struct ResumePlan {
  bool resume = false;      // `loaded` holds the checkpoint to restore
  LoadedCheckpoint loaded;  // verified
  std::string run_id;       // the lineage this run saves into
  std::string note;         // what was done or found, for the log ("" when nothing to say)
};

Status PlanResume(CheckpointManager* ckpt, const ResumeRequest& req, ResumePlan* out);

// A fresh lineage id: 16 hex digits from the clock, the pid and std::random_device.
std::string NewRunId();

}  // namespace dtrain::runtime
