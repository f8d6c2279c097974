#pragma once
// Lets host-only headers name CUDA handle types in CPU-only builds (where they are never used).
#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>
#else
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
#endif
