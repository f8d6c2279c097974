#pragma once
// StateSlice: where part of a saved checkpoint file lives in this rank's training state, so that a restore can
// put the file's bytes there as they are read (runtime/train/restore_sink.h) instead of holding the whole file in
// host memory first. A file may have several slices (a ZeRO-1 shard: one per bucket this rank owns).

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace dtrain::runtime {

struct StateSlice {
  std::string file;         // e.g. "exp_avg.bin"
  int64_t file_numel = 0;   // f32 elements the whole file must hold for the slice to apply
  int64_t file_offset = 0;  // first element of the file that the slice takes
  int64_t numel = 0;        // elements taken
  Tensor* dst = nullptr;    // borrowed: host or device f32 tensor receiving them, or bf16 (narrowed on the way)
  int64_t dst_offset = 0;   // at this element of dst
  // Split masters (train.master_weights split, bf16 dst): the values are split instead (runtime/train/master_halves.h),
  // the high halves into dst and the low halves into `low` (borrowed, host or device, bf16 storage) at dst_offset.
  Tensor* low = nullptr;
};

}  // namespace dtrain::runtime
