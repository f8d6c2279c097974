#pragma once
// NCCL version and feature gates, in one place (like PyTorch's NCCLUtils.hpp NCCL_HAS_*).
// Include only with DT_HAVE_CUDA. dtrain needs NCCL >= 2.12: ncclAvg and ncclBfloat16 (2.10) are
// used unconditionally; newer features are gated below and used only where present.

#include <nccl.h>

#define DT_NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#if DT_NCCL_VERSION_CODE < NCCL_VERSION(2, 12, 0)
#error "dtrain needs NCCL >= 2.12 (ncclAvg, ncclBfloat16); set NCCL_HOME to a newer NCCL"
#endif

// ncclCommFinalize: flushes outstanding work before ncclCommDestroy (2.14).
#define DT_NCCL_HAS_COMM_FINALIZE (DT_NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0))
// ncclConfig_t / ncclCommInitRankConfig (2.14).
#define DT_NCCL_HAS_CONFIG (DT_NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0))
