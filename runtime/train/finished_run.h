#pragma once
// A finished run started again: the checkpoint it resumes from is at or past the run's last step, so there is
// nothing to train. CheckFinishedRun decides what that start answers; the trainer asks it before anything is written
// to run.dir (runtime/train/trainer.h), and either way the start leaves run.dir as it was — except a missing
// final.safetensors (the run killed between its last checkpoint and that file, or run with run.final_weights false),
// which the trainer writes from the checkpoint's weights when run.final_weights is true.
//
//   - This start's config is the run's (the one its checkpoint was saved with), leaving aside checkpoint.resume,
//     checkpoint.overwrite, run.dir and run.final_weights, which say how and where a run starts and whether it leaves
//     a weights file, not what it trains: OK, and the trainer says "already done" (exit 0). The same command again, a
//     scheduler's requeue and a launcher's restart of a job that had finished end here.
//   - Another config: InvalidArgument (exit 2) naming the keys that differ with both values, and the ways out. The
//     new values were never trained with; an exit 0 would tell a script that they had been.
//   - A saved config that does not parse (a checkpoint of another dtrain version): InvalidArgument saying so.
// Stateless and thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

// `saved_yaml`: the checkpoint's config (proto::CheckpointManifest::config_yaml); `step`: its step.
Status CheckFinishedRun(const std::string& saved_yaml, const proto::Config& now, int64_t step);

// The keys whose values differ, "key: A -> B" with the values as ConfigToYaml renders them, in schema order.
std::vector<std::string> ConfigChanges(const proto::Config& before, const proto::Config& now);

}  // namespace dtrain::runtime
