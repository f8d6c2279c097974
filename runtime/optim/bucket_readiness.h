#pragma once
// BucketReadiness: the per-step bookkeeping that GradientReducer and Zero1Optimizer share — which
// parameters have announced their gradient this step, how many parameters each bucket still waits
// for, which buckets may launch next (strictly in bucket order, so every rank issues the same
// collectives in the same order), and the step's sync latch.
//
// Per step:  Mark(i) for every parameter  ->  TakeReady() after each Mark (launch what it returns)
//            ->  Finish(): the buckets never launched (all of them for an unsynced step's caller to
//            ignore); the next Mark starts a new step.
// The sync flag (set_sync) is latched by the step's first Mark (or by Finish for a step without any),
// so changing it mid-step affects the next step only.
//
// Pure host state, no device or communicator; not thread-safe (one owner thread).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

class BucketReadiness {
 public:
  BucketReadiness() = default;
  // `owner` names the caller in errors ("GradientReducer"); param_buckets[i] lists the buckets
  // parameter i overlaps (buckets are 0 .. num_buckets-1, each waited for by every parameter listing
  // it); names[i] is parameter i's name (for errors).
  BucketReadiness(std::string owner, std::vector<std::vector<int>> param_buckets, int num_buckets,
                  std::vector<std::string> names);

  // Parameter i's gradient is final. InvalidArgument for an index out of range, FailedPrecondition
  // for a parameter announced twice in one step (a missing Finish after a backward).
  Status Mark(int param_index);
  // The step's latched sync flag (valid after the step's first Mark, and after Finish until the next Mark).
  bool step_sync() const { return step_sync_; }
  // Buckets [from, to) that became launchable since the last call: the longest run of fully
  // announced buckets starting at the first one not yet taken. from == to when there is none.
  std::pair<int, int> TakeReady();
  // Ends the step: latches sync if no Mark did, returns the buckets not taken yet (the caller launches
  // them when step_sync()) and clears the per-step state.
  std::pair<int, int> Finish();

  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  int num_params() const { return static_cast<int>(param_buckets_.size()); }

 private:
  void Reset();  // per-step state of a step not yet started

  std::string owner_;
  std::vector<std::vector<int>> param_buckets_;
  std::vector<int> bucket_params_;  // how many parameters each bucket waits for
  std::vector<std::string> names_;

  // Per step.
  std::vector<uint8_t> ready_;
  std::vector<int> remaining_;  // parameters of each bucket not yet announced
  int next_ = 0;                // first bucket not yet taken
  bool started_ = false, step_sync_ = true, sync_ = true;
};

}  // namespace dtrain::runtime
