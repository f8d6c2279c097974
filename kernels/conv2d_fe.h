#pragma once
// bf16 channels-last convolutions through cuDNN's graph API (NVIDIA's header-only cudnn-frontend, vendored in
// third_party/cudnn_frontend): the engine behind Conv2d*CudaBf16 (kernels/conv2d.h). Internal to kernels.
//
// Why the graph API and not the legacy cudnnConvolution* calls the f32 path uses: on an H200 (cuDNN 9.14) the
// legacy heuristics pick implicit-GEMM kernels that take 1.69 ms for the CNN's 24 bf16 convolutions of a batch-128
// step; the graph API's heuristics (mode A) pick Hopper engines that take 0.48 ms for the same work
// (bench/conv_algos.cu, bench/conv_fe.cc; bench/results/2026-12-02-cnn-bf16-channels-last-h200.md).
//
// Plans: one cuDNN graph per (geometry, direction), built on first use from heuristics mode A with the fallback
// list behind it, non-deterministic engines deselected (a step is bitwise reproducible on one GPU), the first plan
// that builds kept. Heuristics, not timing: the same plan in every process and run. A failed build is cached as
// its Status, so an unsupported shape fails fast on every later call.
//
// Tensors (all bf16, fp32 accumulation): x [N,H,W,C], w [K,R,S,C], y [N,OH,OW,K] (channels-last), in the
// geometry's terms (Conv2dGeometry). Outputs are overwritten. Work is queued on the stream `handle` is bound to.
// Not thread-safe (one FeConvPlans per model, used on its compute stream only). CUDA builds only.

#include <cudnn.h>

#include <cstddef>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {
struct Conv2dGeometry;

namespace detail {

enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };

struct FeConvPlans;  // the plan cache (conv2d_fe.cc)
FeConvPlans* NewFeConvPlans();
void DeleteFeConvPlans(FeConvPlans* plans);
int64_t FeConvGeometryCount(const FeConvPlans* plans);  // geometries seen (each holds up to three directions)

// One direction of a convolution of geometry `g`:
//   kForward:        out = y  from a = x,  b = w
//   kBackwardData:   out = dx from a = dy, b = w
//   kBackwardFilter: out = dw from a = dy, b = x
// `workspace` (u8, `*workspace_bytes` long) is shared by every plan of the cache: it is grown (never shrunk) from
// `alloc` when a new plan needs more.
Status FeConvRun(cudnnHandle_t handle, FeConvPlans* plans, Allocator* alloc, Tensor* workspace, size_t* workspace_bytes,
                 ConvDirection dir, const Conv2dGeometry& g, const void* a, const void* b, void* out);

}  // namespace detail
}  // namespace dtrain::ops
