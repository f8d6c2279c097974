#include "models/memory_plan.h"

#include <cstdio>

#include "core/allocator.h"

namespace dtrain::models {

int64_t MemoryPlanInputs::Round(int64_t bytes) const {
  const size_t b = static_cast<size_t>(bytes < 0 ? 0 : bytes);
  return static_cast<int64_t>(cuda ? CudaCachingAllocator::RoundSize(b) : CpuAllocator::RoundSize(b));
}

int64_t MemoryPlanInputs::Bytes(int64_t numel, DType dt) const {
  return Round(numel * static_cast<int64_t>(DTypeSize(dt)));
}

int64_t MemoryPlan::model_total() const {
  return params + grads + working_copy + fp8 + activations + backward_scratch + logits + workspace;
}

int64_t MemoryPlan::total() const { return model_total() + master_copy + optimizer_state + comm + data; }

std::string FormatBytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1024.0 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f KiB", b / 1024.0);
  }
  return buf;
}

std::string MemoryPlan::Table() const {
  struct Line {
    const char* name;
    int64_t bytes;
    std::string note;
  };
  const Line lines[] = {{"parameters", params, ""},
                        {"gradients", grads, ""},
                        {"working copy", working_copy, "16-bit weights for the GEMMs"},
                        {"fp8 copies", fp8, "weights, kept activations, scratch"},
                        {"master copy", master_copy, ""},
                        {"optimizer state", optimizer_state, ""},
                        {"activations", activations, activation_policy},
                        {"backward scratch", backward_scratch, ""},
                        {"logits/loss", logits, ""},
                        {"workspace", workspace, ""},
                        {"communication", comm, ""},
                        {"input batches", data, ""}};
  std::string s;
  char buf[160];
  for (const Line& l : lines) {
    if (l.bytes == 0) continue;
    std::snprintf(buf, sizeof(buf), "  %-17s %12s%s%s\n", l.name, FormatBytes(l.bytes).c_str(),
                  l.note.empty() ? "" : "  ", l.note.c_str());
    s += buf;
  }
  std::snprintf(buf, sizeof(buf), "  %-17s %12s per rank", "total", FormatBytes(total()).c_str());
  s += buf;
  if (host_state == 0) return s;
  std::snprintf(buf, sizeof(buf), "\n  %-17s %12s  optimizer state in page-locked host memory (optim.offload cpu)",
                "host memory", FormatBytes(host_state).c_str());
  return s + buf;
}

}  // namespace dtrain::models
