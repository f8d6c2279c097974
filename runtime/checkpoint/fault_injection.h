#pragma once
// Fault injection for tests of failure handling, driven by one environment variable read once:
//
//   DTRAIN_FAULT="rank=1,step=5,action=error"
//     rank    which rank misbehaves (default: every rank)
//     step    at the start of which optimizer step (0-based; default 0)
//     attempt only in the launch attempt with this DTRAIN_RESTART_COUNT (default: every attempt), so
//             a test can fail the first attempt and let `dtrain launch --max-restarts` resume
//     action  error  the worker returns Status::Internal("injected fault ...") and exits 1
//             kill   the worker SIGKILLs itself (a crash: no cleanup, no message)
//             hang   the worker sleeps forever (peers block in the next collective)
//             pause  the worker sleeps until a preemption signal arrives, at most `seconds` (default 60), then
//                    goes on (an attempt held open until the launcher asks for its checkpoint)
//             kill_in_ckpt  the worker SIGKILLs itself while writing the checkpoint of step S, at
//                    the point `phase` of the save (a crash in the middle of a save)
//     seconds pause only: the longest sleep
//     phase   kill_in_ckpt only: snapshot | data | before_manifest (default) | manifest | latest |
//             retention — the points of CheckpointManager::Save (runtime/checkpoint/checkpoint.h, CheckpointPhase)
//
// Storage faults (failing, hanging or truncating writes) are DTRAIN_STORAGE_FAULT's job
// (storage/fault_storage.h); docs/faults.md walks both through every phase of a save.
// Unset: no effect and no cost beyond one integer compare per step. A malformed value is an
// InvalidArgument naming the variable, so a typo never silently disables a test's fault.

#include <cstdint>
#include <string>

#include "core/status.h"
#include "runtime/checkpoint/checkpoint.h"

namespace dtrain::runtime {

class FaultInjector {
 public:
  // Parses `spec` (the variable's value; empty = disabled).
  static Status Parse(const std::string& spec, FaultInjector* out);
  // Parses $DTRAIN_FAULT (a test switch, read here only), disabled when its `attempt` differs from `attempt` (the
  // worker's DTRAIN_RESTART_COUNT, from comm::DistEnv).
  static Status FromEnv(int64_t attempt, FaultInjector* out);

  // Called by the trainer at the start of every step (actions error, kill, hang).
  Status AtStep(int rank, int64_t step) const;
  // Called by the checkpoint writer at each phase of the save of step `step` (action kill_in_ckpt).
  Status AtCheckpointWrite(int rank, int64_t step, CheckpointPhase phase = CheckpointPhase::kBeforeManifest) const;
  bool enabled() const { return !action_.empty(); }

 private:
  int rank_ = -1;
  int64_t step_ = 0;
  int64_t attempt_ = -1;  // -1: every attempt
  int64_t pause_s_ = 60;  // action pause
  std::string action_;
  CheckpointPhase phase_ = CheckpointPhase::kBeforeManifest;
  std::string spec_;
};

}  // namespace dtrain::runtime
