#pragma once
// Where a training step's time goes, and a plain verdict when one phase dominates.
//
// The phases are those of metrics.jsonl's "train" records (times in ms, per optimizer step):
//   data_ms          the loop waited for the next batch (the loader was behind);
//   fwd_bwd_ms       forward and backward compute;
//   comm_exposed_ms  gradient communication not hidden behind backward (the host waited for it);
//   optim_ms         the optimizer update (and ZeRO-1's all-gather);
//   ckpt_stall_ms    the loop stopped for a checkpoint (snapshot, or the whole save when sync);
//   step_ms          the whole step; step_ms - sum of the phases is "other" (launch overhead,
//                    logging, host syncs not attributed to a phase).
//
// Verdict rules. A phase is a bottleneck when its share of step_ms reaches its threshold:
//   input-bound          data wait        >= 20%   more loader threads or a deeper prefetch queue
//   communication-bound  exposed comm     >= 20%   bigger buckets, bf16 compression, more work per step
//   checkpoint-bound     checkpoint stall >= 10%   async checkpoints or fewer of them
//   optimizer-bound      optimizer        >= 25%   ZeRO-1 sharding or gradient accumulation (offloaded state:
//                                                  accumulation, or no offload)
//   host-bound           other            >= 25%   a trace shows where the host spends the time
// Among the bottlenecks the one with the largest share is reported. With none, the step is
// "compute-bound" when forward+backward is >= 60% (the healthy case), else there is no verdict.
// The thresholds are deliberately coarse: a verdict should be worth acting on.
//
// All functions are pure and thread-safe; StepTimeWindow is thread-compatible.

#include <cstdint>
#include <string>

namespace dtrain::runtime {

struct StepPhases {
  double data_ms = 0;
  double fwd_bwd_ms = 0;
  double comm_exposed_ms = 0;
  double optim_ms = 0;
  double ckpt_stall_ms = 0;
  double step_ms = 0;

  // step_ms minus the phases, never below 0 (timers of overlapping phases can add up to a bit more).
  double other_ms() const;
};

constexpr double kInputBoundShare = 0.20;
constexpr double kCommBoundShare = 0.20;
constexpr double kCheckpointBoundShare = 0.10;
constexpr double kOptimizerBoundShare = 0.25;
constexpr double kHostBoundShare = 0.25;
constexpr double kComputeBoundShare = 0.60;

// For the progress line, shares rounded to whole percent:
//   "data 38% | fwd+bwd 45% | comm 8% | optim 5% | ckpt 0% | other 4%"
// "" when step_ms <= 0.
std::string FormatStepBreakdown(const StepPhases& p);

// The settings a verdict's advice names, as the run has them: the advice quotes their values and never suggests
// turning on what is on already (a communication-bound run with dist.bf16_compress set is told to raise
// dist.bucket_mb or do more work per step, not to set bf16_compress).
struct TuningSettings {
  int64_t data_workers = 4;
  int64_t data_prefetch = 4;
  int64_t batch_size = 0;
  int64_t grad_accum_steps = 1;
  double bucket_mb = 25;
  bool bf16_compress = false;
  bool zero1 = false;
  bool offload = false;  // optim.offload cpu
  bool checkpoint_async = true;
  int64_t checkpoint_every_steps = 500;
};

// The verdict (see the file comment), e.g.
//   "input-bound: data wait 38% of the step; raise data.workers (4) or data.prefetch (4)"
// "" when no rule fires or step_ms <= 0.
std::string StepVerdict(const StepPhases& p, const TuningSettings& s);

// Mean phase times over the steps since the last Reset (the progress line's window).
class StepTimeWindow {
 public:
  void Add(const StepPhases& p);
  // All zero when empty.
  StepPhases Mean() const;
  int64_t count() const { return count_; }
  void Reset() { *this = StepTimeWindow(); }

 private:
  StepPhases sum_;
  int64_t count_ = 0;
};

}  // namespace dtrain::runtime
