#pragma once
// Test helpers for numerical ops: a central-difference gradient checker, seeded random vectors, and small
// host/device tensor utilities for CPU-vs-CUDA comparisons. Test-only code (library dtrain_testing).

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::testing {

// ---- gradient checking --------------------------------------------------------------------------------------

// A scalar function of a flat parameter vector, evaluated in double precision.
using ScalarFn = std::function<double(const std::vector<double>&)>;

struct GradCheckResult {
  // max over i of |analytic_i - numeric_i| / max(|analytic_i|, |numeric_i|, floor).
  double max_rel_error = 0;
  int64_t worst_index = -1;
  double analytic = 0;  // at worst_index
  double numeric = 0;   // at worst_index
  std::string ToString() const;
};

// Compares `analytic` (the claimed gradient of f at x) with central differences
// (f(x + h e_i) - f(x - h e_i)) / 2h for every i. `floor` keeps near-zero components from dividing by ~0:
// below it the error is effectively absolute. With f64 and h = 1e-5 the difference error is ~1e-10 for
// smooth O(1) functions, so a correct gradient gives max_rel_error well under 1e-6. Kinks (ReLU at 0) must be
// kept at least h away from x.
GradCheckResult CheckGradient(const ScalarFn& f, const std::vector<double>& x, const std::vector<double>& analytic,
                              double h = 1e-5, double floor = 1e-3);

// ---- data ---------------------------------------------------------------------------------------------------

// n values uniform in [lo, hi), reproducible from `seed` (std::mt19937_64).
std::vector<double> RandomVector(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
// sum_i w[i] * y[i]: the scalar loss whose gradient w.r.t. y is w (the usual way to check a backward pass).
double Dot(const std::vector<double>& w, const std::vector<double>& y);

// ---- tensors ------------------------------------------------------------------------------------------------

// A new tensor of `shape` and `dtype` (f32, f64, i32 or bf16) on ctx's device, holding `values` converted from
// double (bf16: rounded to nearest even on the host, core/bf16.h; values.size() must equal the element count).
// Synchronizes ctx's stream.
Status MakeTensor(DeviceContext& ctx, DType dtype, const std::vector<int64_t>& shape, const std::vector<double>& values,
                  Tensor* out);
// The elements of `t` (f32, f64, i32 or bf16, on any device) converted to double. Synchronizes ctx's stream.
Status Fetch(DeviceContext& ctx, const Tensor& t, std::vector<double>* out);
// MakeTensor's tensor placed `offset` elements into a larger allocation (offset 1: not 16-byte aligned, the path of
// a kernel's scalar fallback).
Status MakeTensorAt(DeviceContext& ctx, DType dtype, const std::vector<int64_t>& shape,
                    const std::vector<double>& values, int64_t offset, Tensor* out);
// bf16 tensors as raw bits (NaN payloads, ties and bitwise comparisons), copied without any conversion.
Status MakeBf16FromBits(DeviceContext& ctx, const std::vector<int64_t>& shape, const std::vector<uint16_t>& bits,
                        Tensor* out);
Status FetchBf16Bits(DeviceContext& ctx, const Tensor& t, std::vector<uint16_t>* bits);

// Max |a_i - b_i| (infinite on NaN or a size mismatch) and the relative Frobenius error ||a - b|| / ||b||.
double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b);
double RelFrobenius(const std::vector<double>& a, const std::vector<double>& b);
// max(1, max_i |v_i|): the scale for "max abs error <= tol * scale" tolerances.
double Scale(const std::vector<double>& v);

}  // namespace dtrain::testing

// ASSERT that a Status is OK, printing it otherwise.
#ifndef DT_ASSERT_OK
#define DT_ASSERT_OK(expr)                                       \
  do {                                                           \
    const ::dtrain::Status _dt_assert_st = (expr);               \
    ASSERT_TRUE(_dt_assert_st.ok()) << _dt_assert_st.ToString(); \
  } while (0)
#endif

// In a TEST body: skip when no GPU is visible (CPU-only machines and CI).
#define DT_SKIP_WITHOUT_CUDA()                                                                             \
  do {                                                                                                     \
    if (::dtrain::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CPU-vs-CUDA check needs a GPU"; \
  } while (0)
