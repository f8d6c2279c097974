#pragma once
// NVTX ranges for Nsight timelines: `DT_NVTX_RANGE("forward")` or `DT_NVTX_FN()` in a function.
// Compiled out unless DT_HAVE_NVTX (CUDA build with DT_ENABLE_NVTX).

#if DT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

namespace dtrain {
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
}  // namespace dtrain

#define DT_NVTX_CAT2(a, b) a##b
#define DT_NVTX_CAT(a, b) DT_NVTX_CAT2(a, b)
#define DT_NVTX_RANGE(name) ::dtrain::NvtxRange DT_NVTX_CAT(_dt_nvtx_, __LINE__)(name)
#else
#define DT_NVTX_RANGE(name) \
  do {                      \
  } while (0)
#endif

#define DT_NVTX_FN() DT_NVTX_RANGE(__func__)
