#include "kernels/matmul_fp8.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/bias.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"

#if DT_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace dtrain::ops {

void MatmulFp8Cpu(float* c, const uint8_t* a, Fp8Format a_format, float a_scale_inv, const uint8_t* b,
                  Fp8Format b_format, float b_scale_inv, int64_t m, int64_t n, int64_t k, bool accumulate) {
  // Dequantize through a 256-entry table per operand (the fp8 value times the scale, one f32 rounding: exact for the
  // power-of-two scales of fp8.h), then the f32 reference GEMM with B transposed.
  auto dequantize = [](const uint8_t* q, int64_t count, Fp8Format f, float scale_inv) {
    float table[256];
    for (int v = 0; v < 256; ++v) table[v] = Fp8ToFloat(static_cast<uint8_t>(v), f) * scale_inv;
    std::vector<float> out(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out[i] = table[q[i]];
    return out;
  };
  const std::vector<float> da = dequantize(a, m * k, a_format, a_scale_inv);
  const std::vector<float> db = dequantize(b, n * k, b_format, b_scale_inv);
  MatmulCpu<float>(c, da.data(), false, db.data(), true, m, n, k, 1.f, accumulate ? 1.f : 0.f);
}

namespace {

// An epilogue tensor of c's dtype and device with `shape`, or absent.
Status CheckEpilogueTensor(const char* name, const Tensor* t, const Tensor& c, const std::vector<int64_t>& shape) {
  if (t == nullptr) return Status::OK();
  DT_CHECK_ARG(t->dtype() == c.dtype() && t->device() == c.device() && t->shape() == shape,
               "MatmulFp8: " << name << " " << t->ToString() << " must match c " << c.ToString() << " in dtype and "
                             << "device, with " << shape.size() << "-D shape [" << shape[0]
                             << (shape.size() > 1 ? "," + std::to_string(shape[1]) : std::string()) << "]");
  return Status::OK();
}

Status CheckScaleInv(const DeviceContext& ctx, const char* name, const Tensor& t) {
  DT_CHECK_ARG(t.numel() == 1 && t.dtype() == DType::kF32 && t.device() == ctx.type(),
               "MatmulFp8: " << name << " must be a one-element f32 tensor on " << DeviceName(ctx.type()) << ", got "
                             << t.ToString());
  return Status::OK();
}

}  // namespace

Status MatmulFp8(DeviceContext& ctx, const Tensor& a, Fp8Format a_format, const Tensor& a_scale_inv, const Tensor& b,
                 Fp8Format b_format, const Tensor& b_scale_inv, Tensor* c, const MatmulFp8Options& opts) {
  DT_CHECK_ARG(c != nullptr, "MatmulFp8: c is null");
  DT_CHECK_ARG(a.ndim() == 2 && b.ndim() == 2 && c->ndim() == 2 && a.dim(1) == b.dim(1) && c->dim(0) == a.dim(0) &&
                   c->dim(1) == b.dim(0),
               "MatmulFp8: shapes do not match: a " << a.ToString() << " must be [M,K], b " << b.ToString()
                                                    << " [N,K] and c " << c->ToString() << " [M,N]");
  DT_CHECK_ARG(a.dtype() == DType::kU8 && b.dtype() == DType::kU8,
               "MatmulFp8: a " << a.ToString() << " and b " << b.ToString() << " must be u8 (fp8 bytes)");
  DT_CHECK_ARG(a.device() == ctx.type() && b.device() == ctx.type() && c->device() == ctx.type(),
               "MatmulFp8: a " << a.ToString() << ", b " << b.ToString() << ", c " << c->ToString() << " not all on "
                               << DeviceName(ctx.type()));
  DT_RETURN_IF_ERROR(CheckScaleInv(ctx, "a_scale_inv", a_scale_inv));
  DT_RETURN_IF_ERROR(CheckScaleInv(ctx, "b_scale_inv", b_scale_inv));
  const int64_t m = a.dim(0), n = b.dim(0), k = a.dim(1);
  DT_RETURN_IF_ERROR(CheckEpilogueTensor("bias", opts.bias, *c, {n}));
  DT_RETURN_IF_ERROR(CheckEpilogueTensor("gelu_aux", opts.gelu_aux, *c, {m, n}));
  DT_RETURN_IF_ERROR(CheckEpilogueTensor("residual", opts.residual, *c, {m, n}));
  const bool epilogue = opts.bias != nullptr || opts.gelu_aux != nullptr || opts.residual != nullptr;
  DT_CHECK_ARG(!epilogue || !opts.accumulate, "MatmulFp8: an epilogue cannot accumulate into c " << c->ToString());
  DT_CHECK_ARG(opts.gelu_aux == nullptr || opts.bias != nullptr, "MatmulFp8: gelu_aux needs a bias");
  if (!ctx.is_cuda()) {
    DT_CHECK_ARG(c->dtype() == DType::kF32, "MatmulFp8: the CPU reference writes an f32 c, got " << c->ToString());
    float* y = c->data<float>();
    MatmulFp8Cpu(y, a.data<uint8_t>(), a_format, a_scale_inv.data<float>()[0], b.data<uint8_t>(), b_format,
                 b_scale_inv.data<float>()[0], m, n, k, opts.accumulate);
    if (opts.bias != nullptr) BiasAddCpu<float>(y, opts.bias->data<float>(), m, n);
    if (opts.gelu_aux != nullptr) {
      float* aux = opts.gelu_aux->data<float>();
      std::copy(y, y + m * n, aux);
      GeluForwardCpu<float>(y, aux, m * n);
    }
    if (opts.residual != nullptr) AddCpu<float>(y, y, opts.residual->data<float>(), m * n);
    return Status::OK();
  }
#if DT_HAVE_CUDA
  DT_CHECK_ARG(ctx.blas() != nullptr, "MatmulFp8: CUDA context without cuBLAS handles");
  MatmulFp8Args args;
  args.a = a.data<uint8_t>();
  args.b = b.data<uint8_t>();
  args.a_format = a_format;
  args.b_format = b_format;
  args.a_scale_inv = a_scale_inv.data<float>();
  args.b_scale_inv = b_scale_inv.data<float>();
  args.c = c->data();
  args.c_dtype = c->dtype();
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = opts.accumulate;
  args.fast_accum = opts.fast_accum;
  args.bias = opts.bias != nullptr ? opts.bias->data() : nullptr;
  args.gelu_aux = opts.gelu_aux != nullptr ? opts.gelu_aux->data() : nullptr;
  args.residual = opts.residual != nullptr ? opts.residual->data() : nullptr;
  return MatmulFp8Cuda(*ctx.blas(), args, ctx.stream());
#else
  return Status::Unavailable("MatmulFp8: CUDA tensor in a build without CUDA");
#endif
}

Status CheckFp8Device(const DeviceContext& ctx, const std::string& what) {
  DT_CHECK_ARG(ctx.is_cuda(), what << ": FP8 GEMMs need a CUDA GPU of compute capability 8.9 or newer (Hopper: 9.0); "
                                      "this run is on the CPU");
#if DT_HAVE_CUDA
  int major = 0, minor = 0;
  DT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.device_index()));
  DT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx.device_index()));
  DT_CHECK_ARG(major * 10 + minor >= 89, what << ": FP8 GEMMs need compute capability 8.9 or newer (Hopper: 9.0); GPU "
                                              << ctx.device_index() << " is " << major << "." << minor);
  return Status::OK();
#else
  return Status::InvalidArgument(what + ": FP8 GEMMs need a build with CUDA");
#endif
}

}  // namespace dtrain::ops
