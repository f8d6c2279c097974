// Tests of optim.offload cpu (runtime/optim/offloaded_state.h through Optimizer): an optimizer whose state lives in
// host memory and is updated chunk by chunk gives bit for bit the parameters and state of the same optimizer with
// its state in place, for every registered algorithm and AdamW's bf16 storage, over several steps with clipping and
// chunks that do not divide the buffer — on the CPU (the chunk loop, in place) and on a GPU (the streamed ring:
// more chunks than slots, so every slot is refilled).
#include "runtime/optim/offloaded_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "runtime/optim/optimizer.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

struct Case {
  std::string name;
  DType params = DType::kF32, state = DType::kF32;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const std::string& name : OptimAlgorithmNames()) out.push_back({name});
  out.push_back({"adamw", DType::kBF16, DType::kF32});
  out.push_back({"adamw", DType::kF32, DType::kBF16});
  out.push_back({"adamw", DType::kBF16, DType::kBF16});
  return out;
}

// The bytes of t (any device), after ctx's queued work.
std::vector<char> Bytes(DeviceContext& ctx, const Tensor& t) {
  std::vector<char> out(t.nbytes());
  Tensor host = Tensor::Wrap(out.data(), t.shape(), t.dtype(), DeviceType::kCPU);
  EXPECT_TRUE(host.CopyFrom(t, ctx.stream()).ok());
  EXPECT_TRUE(ctx.Synchronize().ok());
  return out;
}

// Random f32 values in a tensor of `dtype` on ctx's device (bf16: the top halves).
Tensor Random(DeviceContext& ctx, int64_t n, DType dtype, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  std::vector<uint16_t> half(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    half[i] = static_cast<uint16_t>(bits >> 16);
  }
  void* src = dtype == DType::kF32 ? static_cast<void*>(v.data()) : static_cast<void*>(half.data());
  Tensor t;
  EXPECT_TRUE(Tensor::Empty({n}, dtype, ctx.allocator(), &t).ok());
  EXPECT_TRUE(t.CopyFrom(Tensor::Wrap(src, {n}, dtype, DeviceType::kCPU), ctx.stream()).ok());
  return t;
}

// Four steps of each case, in place and offloaded in chunks of `chunk`: equal params and state, bit for bit.
void ExpectOffloadedEqualsInPlace(DeviceContext& ctx, int64_t n, int64_t chunk) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name + " params " + DTypeName(c.params) + " state " + DTypeName(c.state));
    OptimizerOptions o;
    o.name = c.name;
    o.weight_decay = 0.01;
    o.grad_clip = 20.0;  // random grads of norm ~ sqrt(n): clipping is active
    if (c.name == "lion") o.beta2 = 0.99;
    o.param_dtype = c.params;
    o.state_dtype = c.state;
    o.seed = 7;
    std::unique_ptr<Optimizer> in_place, offloaded;
    ASSERT_TRUE(Optimizer::Create(ctx, o, n, &in_place).ok());
    o.offload = true;
    o.offload_chunk = chunk;
    ASSERT_TRUE(Optimizer::Create(ctx, o, n, &offloaded).ok());
    ASSERT_TRUE(offloaded->offloaded());
    std::mt19937 rng(11);
    Tensor p0 = Random(ctx, n, c.params, &rng), p1;
    ASSERT_TRUE(Tensor::Empty({n}, c.params, ctx.allocator(), &p1).ok());
    ASSERT_TRUE(p1.CopyFrom(p0, ctx.stream()).ok());
    for (int s = 0; s < 4; ++s) {
      Tensor g = Random(ctx, n, DType::kF32, &rng);
      const double lr = 0.01 / (s + 1);
      ASSERT_TRUE(in_place->Step(ctx, p0, g, lr).ok());
      ASSERT_TRUE(offloaded->Step(ctx, p1, g, lr).ok());
      ASSERT_TRUE(ctx.Synchronize().ok());  // g goes out of scope
    }
    EXPECT_EQ(Bytes(ctx, p1), Bytes(ctx, p0));
    ASSERT_TRUE(offloaded->SettleState().ok());
    const auto a = in_place->state(), b = offloaded->state();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i].first, a[i].first);
      EXPECT_FALSE(b[i].second->is_cuda()) << b[i].first << " is not in host memory";
      EXPECT_EQ(Bytes(ctx, *b[i].second), Bytes(ctx, *a[i].second)) << a[i].first;
    }
  }
}

TEST(OffloadedState, CpuChunksEqualTheWholeBuffer) {
  std::unique_ptr<DeviceContext> ctx;
  ASSERT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  ExpectOffloadedEqualsInPlace(*ctx, 1003, 64);  // 16 chunks, the last one partial
}

TEST(OffloadedState, RingHoldsAtMostFourChunks) {
  EXPECT_EQ(OffloadedState::RingNumel(100, 64), 100);
  EXPECT_EQ(OffloadedState::RingNumel(1000, 64), 4 * 64);
  EXPECT_EQ(OffloadedState::RingNumel(int64_t{1} << 30, 0), 4 * OffloadedState::kDefaultChunk);
}

TEST(OffloadedStateCuda, StreamedRingEqualsStateOnTheDevice) {
  DT_SKIP_WITHOUT_GPU("the streamed update");
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  ExpectOffloadedEqualsInPlace(*gpu, 100003, 4096);  // 25 chunks through 4 slots
}

}  // namespace
}  // namespace dtrain::runtime
