#pragma once
// The pure decisions of an elastic launch (`dtrain launch --nnodes MIN:MAX --hosts|--hostfile ...`): which hosts
// an attempt runs on, and how the batch is split at that world size. No processes, no files: the elastic restart
// policies (launcher/elastic_launch.cc, launcher/slurm_elastic.cc) gather the facts (the hostfile re-read, the
// reachability probe, the failed rank's host) and ask these.
//
// Batch semantics across world sizes (--elastic-batch):
//   global (default): the global batch G = data.batch_size * train.grad_accum_steps * W0 of the full host set
//     (MAX hosts) stays the same at every world size W, so optimizer steps, the LR schedule (a function of the
//     step, hence of samples seen) and the checkpointed data position (global samples consumed) mean the same:
//     the per-rank share G / W is split into grad_accum_steps micro-steps of at most the configured
//     data.batch_size each (the fewest micro-steps that divide the share). W must divide G.
//   per-gpu: data.batch_size and grad_accum_steps stay; the global batch scales with W. The schedule then counts
//     samples: schedule.samples_per_step is set to the full host set's global batch (unless the config sets it), so
//     the LR, train.max_steps and the run's length follow samples seen as in an uninterrupted run on MAX hosts.

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/hostfile.h"
#include "proto/config.pb.h"

namespace dtrain::launcher {

// "N" (fixed: min = max = N, elastic false) or "MIN:MAX" with 1 <= MIN <= MAX (elastic true).
Status ParseNodeRange(const std::string& text, int* min_nodes, int* max_nodes, bool* elastic);

enum class ElasticBatch { kGlobal, kPerGpu };

struct BatchPlan {
  int64_t batch_size = 0;        // data.batch_size per rank and micro-step
  int64_t grad_accum_steps = 0;  // train.grad_accum_steps
};

// The batch at world size `world` of a job configured with (batch_size, grad_accum_steps) for `full_world`
// ranks. InvalidArgument naming the sizes when the global batch cannot be kept (world does not divide it).
Status PlanBatch(int64_t batch_size, int64_t grad_accum_steps, int full_world, int world, ElasticBatch mode,
                 BatchPlan* out);

// The config overrides (`--set KEY=VALUE`) of an attempt at `world` ranks of the job `cfg` planned for `full_world`
// ranks: data.batch_size and train.grad_accum_steps from PlanBatch, and in per-gpu mode schedule.samples_per_step.
Status AttemptBatchSets(const proto::Config& cfg, int full_world, int world, ElasticBatch mode,
                        std::vector<std::string>* sets);

// The host set of an elastic job. Hosts come from the hostfile (or --hosts) in its order; a host is dropped
// when it is lost and may rejoin once the probe finds it reachable again, no sooner than `rejoin_after` after
// it was dropped (a host whose ranks were killed but which still answers would otherwise come back at once).
class ElasticHosts {
 public:
  using Clock = std::chrono::steady_clock;
  ElasticHosts(int min_nodes, int max_nodes, std::chrono::seconds rejoin_after)
      : min_(min_nodes), max_(max_nodes), rejoin_after_(rejoin_after) {}

  // The listed hosts now (the hostfile re-read). A dropped host no longer listed is forgotten.
  void SetListed(const std::vector<HostSlots>& hosts);
  // Marks `name` lost at `now` (no-op for an unknown or already dropped host). With `vanish_first` (a host that gave
  // a spot notice: it still answers until it is reclaimed), the host may rejoin only after a probe found it silent
  // once (Silent()): a fresh host at its address, not the one about to go.
  void Drop(const std::string& name, Clock::time_point now, bool vanish_first = false);
  // A probe of dropped host `name` got no answer.
  void Silent(const std::string& name) { vanish_first_.erase(name); }
  // `name` was dropped with vanish_first and no probe has found it silent yet: an answer from it does not count.
  bool MustVanishFirst(const std::string& name) const { return vanish_first_.count(name) > 0; }
  // Dropped hosts that may rejoin at `now` (waited long enough): the ones to probe.
  std::vector<std::string> RejoinCandidates(Clock::time_point now) const;
  // `name` answered the probe: it is usable again.
  void Rejoin(const std::string& name);
  // The hosts of the next attempt: the listed, not dropped ones, first MAX of them. FailedPrecondition when
  // fewer than MIN remain (naming the dropped ones).
  Status Active(std::vector<HostSlots>* out) const;
  bool dropped(const std::string& name) const { return dropped_.count(name) > 0; }

 private:
  int min_, max_;
  std::chrono::seconds rejoin_after_;
  std::vector<HostSlots> listed_;
  std::map<std::string, Clock::time_point> dropped_;
  std::set<std::string> vanish_first_;
};

}  // namespace dtrain::launcher
