// Tests of kernels/matmul_fp8: the CPU reference against a double-precision sum, the argument checks (shapes,
// formats, cuBLASLt's FP8 alignment rules), and on a GPU the cuBLASLt FP8 GEMM against the double reference at
// training-like shapes (with and without fast accumulation, bf16 and f32 C, accumulation into C), and the whole
// amax -> scale -> cast -> GEMM chain replayed from a CUDA graph on new data (skipped without a GPU); the bias, GELU
// and residual epilogues on the CPU (the reference composition) and on the GPU against it.
#include "kernels/matmul_fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/device_context.h"
#include "kernels/fp8.h"
#include "tests/testing/grad_check.h"

#if DT_HAVE_CUDA
#include "core/cuda_graph.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::ops {
namespace {

constexpr Fp8Format kE4M3 = Fp8Format::kE4M3;
constexpr Fp8Format kE5M2 = Fp8Format::kE5M2;

// n fp8 codes of N(0, sigma^2) values quantized with the power-of-two scale of their amax (as training does); the
// scale_inv that dequantizes them is returned.
std::vector<uint8_t> RandomFp8(int64_t n, Fp8Format f, float sigma, uint64_t seed, float* scale_inv) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  const Fp8ScalePair p = Fp8ScaleFromAmax(AmaxCpu(x.data(), n), f);
  std::vector<uint8_t> q(x.size());
  CastToFp8Cpu(q.data(), nullptr, x.data(), 1, n, p.scale, f);
  *scale_inv = p.scale_inv;
  return q;
}

// ref[i,j] = sa sb sum_k A[i,k] B[j,k] in double (the fp8 products are exact), and abs[i,j] = the same sum of
// |products|: the scale of the accumulation error bound.
void DoubleGemm(const std::vector<uint8_t>& a, Fp8Format fa, double sa, const std::vector<uint8_t>& b, Fp8Format fb,
                double sb, int64_t m, int64_t n, int64_t k, std::vector<double>* ref, std::vector<double>* abs) {
  std::vector<double> da(a.size()), db(b.size());
  for (size_t i = 0; i < a.size(); ++i) da[i] = Fp8ToFloat(a[i], fa);
  for (size_t i = 0; i < b.size(); ++i) db[i] = Fp8ToFloat(b[i], fb);
  ref->assign(static_cast<size_t>(m * n), 0.0);
  abs->assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, t = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = da[i * k + kk] * db[j * k + kk];
        s += p;
        t += std::fabs(p);
      }
      (*ref)[i * n + j] = s * sa * sb;
      (*abs)[i * n + j] = t * std::fabs(sa * sb);
    }
  }
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// The CPU reference is an f32 GEMM of exactly dequantized operands: within the f32 summation bound
// |err| <= gamma_K * sum|a b| (gamma_K = K u / (1 - K u), u = 2^-24) of the double sum, also when accumulating.
TEST(MatmulFp8Cpu, MatchesDoubleSum) {
  const int64_t m = 37, n = 24, k = 80;
  for (Fp8Format fb : {kE4M3, kE5M2}) {
    float sa = 0, sb = 0;
    const auto a = RandomFp8(m * k, kE4M3, 2.f, 1, &sa);
    const auto b = RandomFp8(n * k, fb, 0.01f, 2, &sb);
    std::vector<double> ref, abs;
    DoubleGemm(a, kE4M3, sa, b, fb, sb, m, n, k, &ref, &abs);
    const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
    std::vector<float> c(static_cast<size_t>(m * n), NAN);  // beta = 0 never reads C
    MatmulFp8Cpu(c.data(), a.data(), kE4M3, sa, b.data(), fb, sb, m, n, k, /*accumulate=*/false);
    for (int64_t i = 0; i < m * n; ++i) ASSERT_LE(std::fabs(c[i] - ref[i]), gamma * abs[i] + 1e-30) << i;
    std::vector<float> c0(c.size());
    for (int64_t i = 0; i < m * n; ++i) c0[i] = c[i] = static_cast<float>(0.5 - i % 7);
    MatmulFp8Cpu(c.data(), a.data(), kE4M3, sa, b.data(), fb, sb, m, n, k, /*accumulate=*/true);
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_LE(std::fabs(c[i] - (ref[i] + c0[i])), (gamma + u) * (abs[i] + std::fabs(c0[i]))) << i;
    }
  }
}

TEST(MatmulFp8Cpu, EntryPointNamesBadShapes) {
  auto cpu = Cpu();
  std::vector<uint8_t> a(4 * 32), b(8 * 16);
  std::vector<float> c(4 * 8);
  float one = 1.f;
  Tensor ta = Tensor::Wrap(a.data(), {4, 32}, DType::kU8, DeviceType::kCPU);
  Tensor tb = Tensor::Wrap(b.data(), {8, 16}, DType::kU8, DeviceType::kCPU);  // K = 16, not a's 32
  Tensor tc = Tensor::Wrap(c.data(), {4, 8}, DType::kF32, DeviceType::kCPU);
  Tensor s = Tensor::Wrap(&one, {1}, DType::kF32, DeviceType::kCPU);
  const Status st = MatmulFp8(*cpu, ta, kE4M3, s, tb, kE4M3, s, &tc);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("u8[8,16]"), std::string::npos) << st.ToString();
}

// The CPU entry point's epilogues are the composition of the reference ops: bias per column, aux = AB + bias and
// c = gelu(aux) (tanh form), and the residual added last; checked against the double sum done by hand.
TEST(MatmulFp8Cpu, EpiloguesComposeTheReferenceOps) {
  auto cpu = Cpu();
  const int64_t m = 9, n = 16, k = 32;
  float sa = 0, sb = 0;
  const auto a = RandomFp8(m * k, kE4M3, 1.f, 5, &sa);
  const auto b = RandomFp8(n * k, kE4M3, 0.1f, 6, &sb);
  std::vector<double> ref, abs;
  DoubleGemm(a, kE4M3, sa, b, kE4M3, sb, m, n, k, &ref, &abs);
  Tensor ta = Tensor::Wrap(const_cast<uint8_t*>(a.data()), {m, k}, DType::kU8, DeviceType::kCPU);
  Tensor tb = Tensor::Wrap(const_cast<uint8_t*>(b.data()), {n, k}, DType::kU8, DeviceType::kCPU);
  Tensor tsa = Tensor::Wrap(&sa, {1}, DType::kF32, DeviceType::kCPU);
  Tensor tsb = Tensor::Wrap(&sb, {1}, DType::kF32, DeviceType::kCPU);
  std::vector<float> bias(n), res(m * n), c(m * n), aux(m * n);
  for (int64_t j = 0; j < n; ++j) bias[j] = 0.25f * static_cast<float>(j % 5) - 0.5f;
  for (int64_t i = 0; i < m * n; ++i) res[i] = static_cast<float>(i % 7) - 3.f;
  Tensor tbias = Tensor::Wrap(bias.data(), {n}, DType::kF32, DeviceType::kCPU);
  Tensor tres = Tensor::Wrap(res.data(), {m, n}, DType::kF32, DeviceType::kCPU);
  Tensor tc = Tensor::Wrap(c.data(), {m, n}, DType::kF32, DeviceType::kCPU);
  Tensor taux = Tensor::Wrap(aux.data(), {m, n}, DType::kF32, DeviceType::kCPU);
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); };
  MatmulFp8Options gelu_opts;
  gelu_opts.bias = &tbias;
  gelu_opts.gelu_aux = &taux;
  DT_ASSERT_OK(MatmulFp8(*cpu, ta, kE4M3, tsa, tb, kE4M3, tsb, &tc, gelu_opts));
  for (int64_t i = 0; i < m * n; ++i) {
    const double pre = ref[i] + bias[i % n];
    ASSERT_NEAR(aux[i], pre, 1e-5 * (abs[i] + 1)) << i;
    ASSERT_NEAR(c[i], gelu(pre), 1e-5 * (abs[i] + 1)) << i;
  }
  MatmulFp8Options res_opts;
  res_opts.bias = &tbias;
  res_opts.residual = &tres;
  DT_ASSERT_OK(MatmulFp8(*cpu, ta, kE4M3, tsa, tb, kE4M3, tsb, &tc, res_opts));
  for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(c[i], ref[i] + bias[i % n] + res[i], 1e-5 * (abs[i] + 4)) << i;
  MatmulFp8Options bad = res_opts;
  bad.accumulate = true;
  const Status st = MatmulFp8(*cpu, ta, kE4M3, tsa, tb, kE4M3, tsb, &tc, bad);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot accumulate"), std::string::npos) << st.ToString();
}

#if DT_HAVE_CUDA
// cuBLASLt's FP8 rules are checked before anything touches the device (so this runs without a GPU).
TEST(MatmulFp8Cuda, RejectsWhatCublasLtCannotRun) {
  BlasHandles no_handles;
  alignas(16) static uint8_t buf[4096];
  const float* scale = reinterpret_cast<const float*>(buf);
  auto args = [&](int64_t m, int64_t n, int64_t k) {
    MatmulFp8Args x;
    x.a = buf;
    x.b = buf;
    x.c = buf;
    x.a_scale_inv = scale;
    x.b_scale_inv = scale;
    x.m = m;
    x.n = n;
    x.k = k;
    return x;
  };
  auto expect_invalid = [&](const MatmulFp8Args& x, const std::string& needle) {
    const Status st = MatmulFp8Cuda(no_handles, x, nullptr);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.ToString().find(needle), std::string::npos) << st.ToString();
  };
  expect_invalid(args(16, 16, 24), "A[16,24]");  // K % 16
  expect_invalid(args(16, 12, 32), "C[16,12]");  // bf16 rows of 24 bytes
  MatmulFp8Args f32 = args(16, 12, 32);
  f32.c_dtype = DType::kF32;  // 48-byte rows: fine, so only the next rule trips
  f32.a = buf + 1;
  expect_invalid(f32, "16-byte aligned");
  MatmulFp8Args both = args(16, 16, 32);
  both.a_format = both.b_format = kE5M2;
  expect_invalid(both, "e5m2 x e5m2");
  MatmulFp8Args no_scale = args(16, 16, 32);
  no_scale.b_scale_inv = nullptr;
  expect_invalid(no_scale, "scale_inv");
  MatmulFp8Args packed_scales = args(16, 16, 32);
  packed_scales.b_scale_inv = scale + 2;  // a neighbour in a packed float array
  expect_invalid(packed_scales, "scale_inv pointers must be 16-byte aligned");
}

class MatmulFp8CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the cuBLASLt FP8 GEMM needs a GPU (sm_89+)";
    ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu_).ok());
  }
  void Upload(DType dtype, const std::vector<int64_t>& shape, const void* host, Tensor* out) {
    DT_ASSERT_OK(Tensor::Empty(shape, dtype, gpu_->allocator(), out));
    DT_ASSERT_OK(out->CopyFrom(Tensor::Wrap(const_cast<void*>(host), shape, dtype, DeviceType::kCPU), gpu_->stream()));
    DT_ASSERT_OK(gpu_->Synchronize());
  }
  // c of `dtype` as doubles.
  std::vector<double> DownloadC(const Tensor& c) {
    std::vector<double> out(static_cast<size_t>(c.numel()));
    if (c.dtype() == DType::kF32) {
      std::vector<float> h(out.size());
      EXPECT_TRUE(Tensor::Wrap(h.data(), c.shape(), c.dtype(), DeviceType::kCPU).CopyFrom(c, gpu_->stream()).ok());
      EXPECT_TRUE(gpu_->Synchronize().ok());
      for (size_t i = 0; i < h.size(); ++i) out[i] = h[i];
    } else {
      std::vector<uint16_t> h(out.size());
      EXPECT_TRUE(Tensor::Wrap(h.data(), c.shape(), c.dtype(), DeviceType::kCPU).CopyFrom(c, gpu_->stream()).ok());
      EXPECT_TRUE(gpu_->Synchronize().ok());
      for (size_t i = 0; i < h.size(); ++i) out[i] = Bf16BitsToF32(h[i]);
    }
    return out;
  }
  // c0 (as doubles, representable in c's dtype) into a new device C.
  void UploadC(DType dtype, int64_t m, int64_t n, const std::vector<double>& c0, Tensor* out) {
    if (dtype == DType::kF32) {
      std::vector<float> h(c0.begin(), c0.end());
      Upload(dtype, {m, n}, h.data(), out);
    } else {
      std::vector<uint16_t> h(c0.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = RoundBf16Rne(static_cast<float>(c0[i]));
      Upload(dtype, {m, n}, h.data(), out);
    }
  }
  std::unique_ptr<DeviceContext> gpu_;
};

// Tolerance, per element: |gpu - ref| <= acc * sum_k |a b| + out * |ref| (+ the same for C when accumulating), ref the
// exact double sum. `acc` is the accumulation: the products are exact, so all error is in the sums. Hopper's FP8
// tensor-core instructions keep fewer bits than f32 in their accumulator (DeepSeek-V3 reports ~14 on H800);
// cuBLASLt without fast_accum adds those partial sums into f32 every few k-steps, so the partial sums' error is
// ~2^-14 of their magnitude: acc = 2^-12 leaves 4x room. With fast_accum the whole K loop stays in the tensor core
// (DeepSeek-V3 measured up to ~2% relative error at K = 4096): acc = 2^-8 of sum|ab|, which for random signs is still
// ~sqrt(K)/256 ~ 0.2x |ref| at K = 3072, far below what a wrong scale, a swapped or transposed operand produces (errors
// of order |ref| itself, plus the Frobenius check below). `out`: one rounding of the result to C's type (bf16: 2^-9
// relative; 2^-8 leaves room for the rounding of a sum already off by acc), 2^-22 for f32.
struct Tol {
  double acc, out, frob;
};
Tol ToleranceFor(DType c, bool fast) {
  const double acc = fast ? std::ldexp(1.0, -8) : std::ldexp(1.0, -12);
  const double out = c == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -22);
  // ||gpu - ref|| / ||ref||: bf16 rounding alone gives ~2^-9 / sqrt(3) = 1.1e-3.
  const double frob = fast ? 2e-2 : (c == DType::kBF16 ? 4e-3 : 2e-3);
  return {acc, out, frob};
}

struct GemmCase {
  int64_t m, n, k;
  Fp8Format fa, fb;
};

TEST_F(MatmulFp8CudaTest, MatchesDoubleReference) {
  // GPT-2 124M's attention projection at 256 tokens, a qkv-like non-square GEMM, a dgrad-like one (e5m2 gradient
  // as A), and a wgrad-like one (K = tokens, e5m2 as B).
  const GemmCase cases[] = {{256, 768, 768, kE4M3, kE4M3},
                            {96, 2304, 768, kE4M3, kE4M3},
                            {256, 768, 3072, kE5M2, kE4M3},
                            {384, 256, 2048, kE4M3, kE5M2}};
  for (const GemmCase& g : cases) {
    float sa = 0, sb = 0;
    const auto a = RandomFp8(g.m * g.k, g.fa, 1.f, 100 + g.k, &sa);
    const auto b = RandomFp8(g.n * g.k, g.fb, 0.02f, 200 + g.n, &sb);
    std::vector<double> ref, abs;
    DoubleGemm(a, g.fa, sa, b, g.fb, sb, g.m, g.n, g.k, &ref, &abs);
    Tensor ta, tb, tsa, tsb;
    Upload(DType::kU8, {g.m, g.k}, a.data(), &ta);
    Upload(DType::kU8, {g.n, g.k}, b.data(), &tb);
    Upload(DType::kF32, {1}, &sa, &tsa);
    Upload(DType::kF32, {1}, &sb, &tsb);
    std::vector<double> c0(ref.size());
    for (size_t i = 0; i < c0.size(); ++i)
      c0[i] = Bf16BitsToF32(RoundBf16Rne(static_cast<float>(ref[i] * ((i % 5) - 2.0))));
    for (DType cdt : {DType::kBF16, DType::kF32}) {
      for (bool fast : {false, true}) {
        for (bool accumulate : {false, true}) {
          const Tol tol = ToleranceFor(cdt, fast);
          Tensor tc;
          UploadC(cdt, g.m, g.n, accumulate ? c0 : std::vector<double>(ref.size(), NAN), &tc);
          DT_ASSERT_OK(MatmulFp8(*gpu_, ta, g.fa, tsa, tb, g.fb, tsb, &tc, {accumulate, fast}));
          const auto got = DownloadC(tc);
          const std::string where = std::string(Fp8FormatName(g.fa)) + " x " + Fp8FormatName(g.fb) +
                                    " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                                    " k=" + std::to_string(g.k) + " -> " + DTypeName(cdt) +
                                    (fast ? " fast_accum" : "") + (accumulate ? " accumulate" : "");
          double worst = 0, num = 0, den = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double want = ref[i] + (accumulate ? c0[i] : 0.0);
            // Accumulating, cuBLASLt rounds the product to C's type before it adds C (seen on the H200: a product
            // that cancels C to within bf16 rounding came back 0), so the output rounding is of |ref| and |c0| too.
            const double rounded = std::fabs(want) + (accumulate ? std::fabs(ref[i]) + std::fabs(c0[i]) : 0.0);
            const double bound = tol.acc * abs[i] + tol.out * rounded + 1e-30;
            const double err = std::fabs(got[i] - want);
            ASSERT_LE(err, bound) << where << " at (" << i / g.n << "," << i % g.n << "): " << got[i] << " vs " << want;
            worst = std::max(worst, err / (abs[i] + 1e-30));
            num += err * err;
            den += want * want;
          }
          const double frob = std::sqrt(num / den);
          EXPECT_LE(frob, tol.frob) << where;
          // The measured errors, for the record of each device run.
          std::cout << where << ": max |err| / sum|ab| = " << worst << ", relative Frobenius error = " << frob << "\n";
        }
      }
    }
  }
}

// amax -> scale -> cast (x as A; w as B, both bf16 [rows, K]) -> GEMM captured once in a CUDA graph and replayed after
// new x values are copied into the same buffer: the scales are read from device memory at each replay, so the result
// follows the new data (3x larger: a frozen scale would saturate the casts and give a wrong result).
TEST_F(MatmulFp8CudaTest, QuantizedChainReplaysInACudaGraph) {
  const int64_t m = 128, n = 256, k = 512;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto bf16_values = [&](int64_t count, float sigma) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = Bf16BitsToF32(RoundBf16Rne(nd(rng) * sigma));
    return v;
  };
  auto to_bits = [](const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = RoundBf16Rne(v[i]);
    return bits;
  };
  const auto w = bf16_values(n * k, 0.05f);
  auto x = bf16_values(m * k, 1.f);
  Tensor tx, tw, qx, qw, c;
  Tensor amax_x, amax_w, s_x, s_w, si_x, si_w;
  const auto w_bits = to_bits(w);
  auto x_bits = to_bits(x);
  Upload(DType::kBF16, {m, k}, x_bits.data(), &tx);
  Upload(DType::kBF16, {n, k}, w_bits.data(), &tw);
  for (Tensor* t : {&qx, &qw}) DT_ASSERT_OK(Tensor::Empty({t == &qx ? m : n, k}, DType::kU8, gpu_->allocator(), t));
  for (Tensor* t : {&amax_x, &amax_w, &s_x, &s_w, &si_x, &si_w}) {
    DT_ASSERT_OK(Tensor::Empty({1}, DType::kF32, gpu_->allocator(), t));
  }
  DT_ASSERT_OK(Tensor::Empty({m, n}, DType::kBF16, gpu_->allocator(), &c));
  auto chain = [&]() -> Status {
    DT_RETURN_IF_ERROR(Fp8Amax(*gpu_, tx, &amax_x));
    DT_RETURN_IF_ERROR(Fp8Amax(*gpu_, tw, &amax_w));
    DT_RETURN_IF_ERROR(Fp8Scale(*gpu_, amax_x, kE4M3, &s_x, &si_x));
    DT_RETURN_IF_ERROR(Fp8Scale(*gpu_, amax_w, kE4M3, &s_w, &si_w));
    DT_RETURN_IF_ERROR(CastToFp8(*gpu_, tx, s_x, kE4M3, &qx, nullptr));
    DT_RETURN_IF_ERROR(CastToFp8(*gpu_, tw, s_w, kE4M3, &qw, nullptr));
    return MatmulFp8(*gpu_, qx, kE4M3, si_x, qw, kE4M3, si_w, &c);
  };
  // The CPU chain on the same values, then the double sum of its fp8 operands.
  auto expect_matches_cpu = [&](const char* when) {
    const Fp8ScalePair px = Fp8ScaleFromAmax(AmaxCpu(x.data(), m * k), kE4M3);
    const Fp8ScalePair pw = Fp8ScaleFromAmax(AmaxCpu(w.data(), n * k), kE4M3);
    std::vector<uint8_t> ax(x.size()), aw(w.size());
    CastToFp8Cpu(ax.data(), nullptr, x.data(), m, k, px.scale, kE4M3);
    CastToFp8Cpu(aw.data(), nullptr, w.data(), n, k, pw.scale, kE4M3);
    std::vector<double> ref, abs;
    DoubleGemm(ax, kE4M3, px.scale_inv, aw, kE4M3, pw.scale_inv, m, n, k, &ref, &abs);
    const auto got = DownloadC(c);
    const Tol tol = ToleranceFor(DType::kBF16, false);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - ref[i]), tol.acc * abs[i] + tol.out * std::fabs(ref[i]) + 1e-30)
          << when << " at " << i << ": " << got[i] << " vs " << ref[i];
    }
  };
  DT_ASSERT_OK(chain());  // eager first: builds the GEMM plan (a heuristic query cannot be captured)
  ASSERT_NO_FATAL_FAILURE(expect_matches_cpu("eager"));
  std::unique_ptr<CudaGraph> graph;
  DT_ASSERT_OK(
      CudaGraph::Capture(gpu_->stream(), std::make_shared<CudaGraphPool>(gpu_->device_allocator()), chain, &graph));
  for (float& v : x) v = Bf16BitsToF32(RoundBf16Rne(v * 3.f));
  x_bits = to_bits(x);
  DT_ASSERT_OK(tx.CopyFrom(Tensor::Wrap(x_bits.data(), {m, k}, DType::kBF16, DeviceType::kCPU), gpu_->stream()));
  DT_ASSERT_OK(graph->Launch(gpu_->stream()));
  DT_ASSERT_OK(gpu_->Synchronize());
  ASSERT_NO_FATAL_FAILURE(expect_matches_cpu("graph replay on 3x data"));
}
// The bf16 epilogues on the GPU (fused by cuBLASLt, or its unfused fallback) against the CPU entry point's f32
// composition of the same fp8 inputs: bias; bias + GELU with the pre-activation saved; bias + residual. Tolerance:
// fast accumulation (the model's forward setting, 2^-8 of sum|ab|, see ToleranceFor) plus the bf16 roundings of the
// output, the aux and the bias/residual inputs (2^-7 of the magnitudes involved).
TEST_F(MatmulFp8CudaTest, EpiloguesMatchTheCpuReference) {
  auto cpu = Cpu();
  const int64_t m = 128, n = 256, k = 256;
  float sa = 0, sb = 0;
  const auto a = RandomFp8(m * k, kE4M3, 1.f, 11, &sa);
  const auto b = RandomFp8(n * k, kE4M3, 0.05f, 12, &sb);
  std::vector<double> ref, abs;
  DoubleGemm(a, kE4M3, sa, b, kE4M3, sb, m, n, k, &ref, &abs);
  std::vector<double> bias(n), res(m * n);
  for (int64_t j = 0; j < n; ++j) bias[j] = Bf16BitsToF32(RoundBf16Rne(0.01f * static_cast<float>(j % 13 - 6)));
  for (int64_t i = 0; i < m * n; ++i) res[i] = Bf16BitsToF32(RoundBf16Rne(0.1f * static_cast<float>(i % 9 - 4)));
  Tensor ta, tb, tsa, tsb;
  Upload(DType::kU8, {m, k}, a.data(), &ta);
  Upload(DType::kU8, {n, k}, b.data(), &tb);
  Upload(DType::kF32, {1}, &sa, &tsa);
  Upload(DType::kF32, {1}, &sb, &tsb);
  Tensor gbias, gres, gc, gaux, cbias, cres, cc, caux;
  DT_ASSERT_OK(testing::MakeTensor(*gpu_, DType::kBF16, {n}, bias, &gbias));
  DT_ASSERT_OK(testing::MakeTensor(*gpu_, DType::kBF16, {m, n}, res, &gres));
  DT_ASSERT_OK(testing::MakeTensor(*gpu_, DType::kBF16, {m, n}, std::vector<double>(m * n, 0.0), &gc));
  DT_ASSERT_OK(testing::MakeTensor(*gpu_, DType::kBF16, {m, n}, std::vector<double>(m * n, 0.0), &gaux));
  DT_ASSERT_OK(testing::MakeTensor(*cpu, DType::kF32, {n}, bias, &cbias));
  DT_ASSERT_OK(testing::MakeTensor(*cpu, DType::kF32, {m, n}, res, &cres));
  DT_ASSERT_OK(testing::MakeTensor(*cpu, DType::kF32, {m, n}, std::vector<double>(m * n, 0.0), &cc));
  DT_ASSERT_OK(testing::MakeTensor(*cpu, DType::kF32, {m, n}, std::vector<double>(m * n, 0.0), &caux));
  Tensor ca = Tensor::Wrap(const_cast<uint8_t*>(a.data()), {m, k}, DType::kU8, DeviceType::kCPU);
  Tensor cb = Tensor::Wrap(const_cast<uint8_t*>(b.data()), {n, k}, DType::kU8, DeviceType::kCPU);
  Tensor csa = Tensor::Wrap(&sa, {1}, DType::kF32, DeviceType::kCPU);
  Tensor csb = Tensor::Wrap(&sb, {1}, DType::kF32, DeviceType::kCPU);
  for (const char* which : {"bias", "bias+gelu", "bias+residual"}) {
    const bool gelu = std::string(which) == "bias+gelu", residual = std::string(which) == "bias+residual";
    MatmulFp8Options g, c;
    g.fast_accum = true;
    g.bias = &gbias;
    c.bias = &cbias;
    if (gelu) g.gelu_aux = &gaux, c.gelu_aux = &caux;
    if (residual) g.residual = &gres, c.residual = &cres;
    DT_ASSERT_OK(MatmulFp8(*gpu_, ta, kE4M3, tsa, tb, kE4M3, tsb, &gc, g));
    DT_ASSERT_OK(MatmulFp8(*cpu, ca, kE4M3, csa, cb, kE4M3, csb, &cc, c));
    std::vector<double> got, want, got_aux, want_aux;
    DT_ASSERT_OK(testing::Fetch(*gpu_, gc, &got));
    DT_ASSERT_OK(testing::Fetch(*cpu, cc, &want));
    if (gelu) {
      DT_ASSERT_OK(testing::Fetch(*gpu_, gaux, &got_aux));
      DT_ASSERT_OK(testing::Fetch(*cpu, caux, &want_aux));
    }
    const double acc = std::ldexp(1.0, -8), out = std::ldexp(1.0, -7);
    for (int64_t i = 0; i < m * n; ++i) {
      const double mag = std::fabs(ref[i]) + std::fabs(bias[i % n]) + (residual ? std::fabs(res[i]) : 0.0);
      const double bound = acc * abs[i] + out * mag + 1e-6;
      ASSERT_NEAR(got[i], want[i], bound) << which << " at " << i;
      if (gelu) ASSERT_NEAR(got_aux[i], want_aux[i], bound) << which << " aux at " << i;
    }
    EXPECT_LE(testing::RelFrobenius(got, want), 2e-2) << which;
  }
}
#endif  // DT_HAVE_CUDA

}  // namespace
}  // namespace dtrain::ops
