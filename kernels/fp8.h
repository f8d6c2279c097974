#pragma once
// FP8 building blocks for per-tensor "current" scaling (issue 35): conversions, amax, scale, and the cast (with an
// optional transposed copy) that feeds kernels/matmul_fp8.h. FP8 bytes are raw uint8_t (Tensor dtype u8); which
// format they hold travels beside them as an Fp8Format.
//
// Formats (OCP 8-bit floating point, as cuda_fp8.h's __NV_E4M3 / __NV_E5M2):
//   e4m3 (E4M3FN): bias 7, max 448, min subnormal 2^-9, no infinities, NaN = S.1111.111 (0x7F / 0xFF).
//   e5m2: bias 15, max 57344, min subnormal 2^-16, IEEE-style: inf = S.11111.00, NaN = S.11111.{01,10,11}.
// Float -> fp8 rounds to nearest even, with subnormals, and SATURATES: a finite value (or an infinity) beyond the
// format's range becomes +-max, as __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) does; NaN becomes 0x7F in both
// formats (the sign is dropped); values that round to zero keep their sign (0x80 for -0 and tiny negatives).
// FloatToFp8 is the CPU reference; the CUDA kernels use cuda_fp8.h's conversions (the sm_89+ cvt.rn.satfinite
// instructions) and agree with it bit for bit (tests/kernels/fp8_test.cc checks both against each other).
//
// Scaling, per tensor and "current" (from this tensor's own amax, no history):
//   amax      = max_i |x_i|                      (NaN if any x_i is NaN; inf if any is inf)
//   scale     = 2^floor(log2(fp8_max / amax))    (fp8 = fp8(x * scale): amax lands in (fp8_max/2, fp8_max])
//   scale_inv = 1 / scale                        (exact; the GEMM's dequantization factor)
//   amax == 0, or amax not finite: scale = scale_inv = 1 (an all-zero tensor needs no scale; a tensor with inf/NaN
//   is a step the loss scaler or the overflow check must skip, and scaling by 1 keeps the NaN/inf visible: NaN
//   stays NaN, inf saturates to +-max). fp8_max / amax overflowing f32 (amax below ~448 / FLT_MAX) gives 2^127.
// Why a power of two (torchao's round_scales_to_power_of_2): an fp8 format is itself floating point, so a value's
// relative rounding error does not depend on where in a binade the scale puts it; the only thing a non-power-of-two
// scale buys is up to one more binade at the bottom (values near amax / 2^(range) stay normal instead of
// subnormal). A power of two in exchange (1) makes x * scale exact in f32 (no rounding before the fp8 rounding, so
// fp8 * scale_inv is exactly x rounded to the scaled fp8 grid), (2) makes scale_inv = 1/scale exact, so the GEMM's
// dequantization adds no error, and (3) keeps the scale constant while amax wanders within a factor of 2 from step
// to step, which makes runs easier to compare. (torchao's rowwise float8 recipe turns the same option on.)
//
// Layers, like every op in kernels:
//   - CPU references: FloatToFp8 / Fp8ToFloat, AmaxCpu, Fp8ScaleFromAmax, CastToFp8Cpu (f32 input; a bf16 input is
//     its exact f32 widening).
//   - CUDA launchers (CUDA builds only), queued on `stream`, never synchronizing the host, and reading every scale
//     from DEVICE memory, so a whole quantize -> GEMM chain can be captured in a CUDA graph:
//       Fp8AmaxCuda*:  *amax = max |x| (device float). Deterministic (max is order-independent): blocks reduce the
//                      |x| bit patterns (non-negative floats order like their bits) and atomicMax them into *amax,
//                      which the launcher zeroes first (cudaMemsetAsync). 128-bit loads when aligned.
//       Fp8ScaleCuda:  scale and scale_inv (device floats) from *amax by the formula above (one thread).
//       CastToFp8Cuda*, Fp8CastFromAmaxCuda*: out[r,c] = fp8(x[r,c] * (*scale)) and/or out_t[c,r] = the same byte (the
//       transposed copy
//                      that Hopper's K-contiguous FP8 GEMMs need for the backward). 128-bit loads when the rows and
//                      pointers allow; the transposed copy goes through a 64x64 tile in shared memory and is written
//                      16 bytes at a time when rows % 16 == 0.
//   - Tensor entry points (Fp8Amax, Fp8Scale, CastToFp8): check shapes/dtypes/devices (InvalidArgument naming
//     them) and dispatch: CPU f32 -> the references, CUDA f32 / bf16 -> the launchers.
// Outputs must not alias inputs.

#include <cstdint>
#include <vector>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

constexpr float kE4M3Max = 448.f;
constexpr float kE5M2Max = 57344.f;
inline float Fp8Max(Fp8Format f) { return f == Fp8Format::kE4M3 ? kE4M3Max : kE5M2Max; }
inline const char* Fp8FormatName(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

// ---- CPU references ---------------------------------------------------------------------------------------------
uint8_t FloatToFp8(float x, Fp8Format f);  // round to nearest even, saturating (see above)
float Fp8ToFloat(uint8_t bits, Fp8Format f);

struct Fp8ScalePair {
  float scale = 1.f;      // fp8 = fp8(x * scale)
  float scale_inv = 1.f;  // x ~= fp8 * scale_inv
};
Fp8ScalePair Fp8ScaleFromAmax(float amax, Fp8Format f);

// max_i |x_i| over the |x| bit patterns (as the kernel reduces them): NaN wins over inf, inf over any finite value.
float AmaxCpu(const float* x, int64_t n);
// out[r,c] = FloatToFp8(x[r,c] * scale) (the product rounded to f32 first, as on the GPU) and/or out_t[c,r] = the
// same byte; either output may be null. x is [rows, cols] row-major.
void CastToFp8Cpu(uint8_t* out, uint8_t* out_t, const float* x, int64_t rows, int64_t cols, float scale, Fp8Format f);

// ---- CUDA launchers (CUDA builds only; device pointers) -----------------------------------------------------------
Status Fp8AmaxCuda(float* amax, const float* x, int64_t n, cudaStream_t stream);
Status Fp8AmaxCudaBf16(float* amax, const uint16_t* x, int64_t n, cudaStream_t stream);
Status Fp8ScaleCuda(float* scale, float* scale_inv, const float* amax, Fp8Format f, cudaStream_t stream);
// *amax = value (one thread: a value baked into a captured graph, where a host-to-device copy is not).
Status Fp8SetAmaxCuda(float* amax, float value, cudaStream_t stream);
// `scale` is a device float; `out` ([rows, cols]) and/or `out_t` ([cols, rows]) may be null (not both).
Status CastToFp8Cuda(uint8_t* out, uint8_t* out_t, const float* x, int64_t rows, int64_t cols, const float* scale,
                     Fp8Format f, cudaStream_t stream);
Status CastToFp8CudaBf16(uint8_t* out, uint8_t* out_t, const uint16_t* x, int64_t rows, int64_t cols,
                         const float* scale, Fp8Format f, cudaStream_t stream);
// Fp8Quantize's cast: CastToFp8Cuda with the scale computed from *amax in every block (no scale kernel between the
// amax and the cast), the grid's first thread writing *scale and *scale_inv (for the GEMM). With col_partials (needs
// out_t): f32 [ceil(rows / 64), cols], the column sums of x (unscaled) over each 64-row tile, for BiasGradFinishCuda
// (kernels/bias.h): the bias gradient from the cast's own loads. Deterministic.
struct Fp8CastFromAmaxArgs {
  uint8_t* out = nullptr;    // [rows, cols], may be null
  uint8_t* out_t = nullptr;  // [cols, rows], may be null (not both)
  float* col_partials = nullptr;
  int64_t rows = 0, cols = 0;
  const float* amax = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  Fp8Format format = Fp8Format::kE4M3;
};
Status Fp8CastFromAmaxCuda(const Fp8CastFromAmaxArgs& args, const float* x, cudaStream_t stream);
Status Fp8CastFromAmaxCudaBf16(const Fp8CastFromAmaxArgs& args, const uint16_t* x, cudaStream_t stream);
constexpr int64_t kFp8CastTileRows = 64;  // the rows of one col_partials row

// ---- Tensor entry points ------------------------------------------------------------------------------------------
// OK for a null amax or a one-element f32 tensor on ctx's device, else InvalidArgument naming `op`: the optional amax
// output of the kernels that fuse Fp8Amax into the pass that writes a tensor (kernels/gelu.h, kernels/layernorm.h,
// kernels/rmsnorm.h, kernels/swiglu.h).
Status CheckAmaxOutput(const DeviceContext& ctx, const char* op, const Tensor* amax);
// That optional amax as the raw launchers take it: its float, or null.
inline float* AmaxData(Tensor* amax) { return amax != nullptr ? amax->data<float>() : nullptr; }
// amax: an f32 tensor of one element on x's device. x: f32 (CPU, CUDA) or bf16 (CUDA), any shape.
Status Fp8Amax(DeviceContext& ctx, const Tensor& x, Tensor* amax);
// *amax = bound (>= 0, finite), queued on ctx's stream: for a tensor whose amax the math bounds, so that its scale
// needs no amax pass (then Fp8QuantizeOptions::amax_ready). E.g. a softmax cross-entropy gradient, (p - onehot) *
// grad_scale with |p - onehot| <= 1: amax <= |grad_scale|. The scale from the bound never saturates, and it is
// current scaling's scale whenever the true amax falls in the bound's power-of-two step of the scale formula (whose
// lower end lies in (bound / 2, bound]); a true amax below that gets a power of two less room than current scaling.
Status Fp8SetAmax(DeviceContext& ctx, float bound, Tensor* amax);
// scale, scale_inv: f32 tensors of one element, from the one-element f32 amax.
Status Fp8Scale(DeviceContext& ctx, const Tensor& amax, Fp8Format f, Tensor* scale, Tensor* scale_inv);
// x [rows, cols] (f32; bf16 on CUDA) -> out u8 [rows, cols] and/or out_t u8 [cols, rows]; pass nullptr (or an
// undefined tensor) for an output not wanted. scale: the one-element f32 tensor from Fp8Scale.
Status CastToFp8(DeviceContext& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, Tensor* out, Tensor* out_t);

// The per-tensor scaling state of one FP8 operand, in ctx's device memory: one-element f32 tensors, each 16-byte
// aligned (kernels/matmul_fp8.h reads scale_inv). Fp8ScaleSlots makes `count` of them in one allocation.
struct Fp8Scales {
  Tensor amax, scale, scale_inv;
};
Status Fp8ScaleSlots(DeviceContext& ctx, int64_t count, Tensor* storage, std::vector<Fp8Scales>* slots);
// What Fp8Quantize may skip or add.
struct Fp8QuantizeOptions {
  // s->amax already holds amax(x): the kernel that wrote x computed it (e.g. kernels/gelu.h's GeluBackward, given
  // s->amax), so the amax pass is skipped.
  bool amax_ready = false;
  // f32 [cols] on ctx's device: dbias += the column sums of x (unscaled; the bias gradient of the linear whose output
  // gradient x is), from the cast's own loads (CUDA: needs out_t). Deterministic.
  Tensor* dbias = nullptr;
};
// Current scaling in one call: s->amax = amax(x) (unless opts.amax_ready), s->scale / s->scale_inv from it, then the
// cast into out and/or out_t (CUDA: one kernel computes the scale and casts). Queued on ctx's stream with no host
// synchronization (CUDA-graph safe). x [rows, cols] as for CastToFp8. The bytes and scales do not depend on
// amax_ready or dbias.
Status Fp8Quantize(DeviceContext& ctx, const Tensor& x, Fp8Format f, Fp8Scales* s, Tensor* out, Tensor* out_t,
                   const Fp8QuantizeOptions& opts = {});

}  // namespace dtrain::ops
