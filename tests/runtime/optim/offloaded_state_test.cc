// Tests of optim.offload cpu (runtime/optim/offloaded_state.h, through Optimizer and alone): an optimizer whose state
// lives in host memory and is updated chunk by chunk gives bit for bit the parameters and state of the same optimizer
// with its state in place, for every registered algorithm and AdamW's bf16 storage, over several steps with clipping
// and chunks that do not divide the buffer — on the CPU (the chunk loop, in place) and on a GPU (the streamed ring:
// more chunks than slots, so every slot is refilled); with a kept part on the device too (optim.offload_keep_gib: its
// end not on a chunk boundary), across a settle in mid-run and into a fresh optimizer whose host state a restore
// wrote; and an update in segments (ZeRO-1's owned ranges) equals the algorithm's update of each range in place,
// with none, part or all of the state kept. Split masters' low halves (a bf16 tensor beside f32 or bf16 moments) are
// one more state tensor there, compared too.
#include "runtime/optim/offloaded_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "runtime/optim/optim_algorithm.h"
#include "runtime/optim/optimizer.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

struct Case {
  std::string name;
  DType params = DType::kF32, state = DType::kF32;
  bool split = false;  // split masters: a bf16 state tensor of low halves beside the others
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const std::string& name : OptimAlgorithmNames()) out.push_back({name});
  out.push_back({"adamw", DType::kBF16, DType::kF32});
  out.push_back({"adamw", DType::kF32, DType::kBF16});
  out.push_back({"adamw", DType::kBF16, DType::kBF16});
  out.push_back({"adamw", DType::kBF16, DType::kF32, true});
  out.push_back({"adamw", DType::kBF16, DType::kBF16, true});
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

// Four steps of each case, in place and offloaded in chunks of `chunk` with `keep_bytes` of the state kept on the
// device (a settle after step 2, as a checkpoint does): equal params and state, bit for bit; then a fifth step of both
// and of a fresh offloaded optimizer (another kept part) whose host state was written from the settled one, as a
// restore does: all three equal.
void ExpectOffloadedEqualsInPlace(DeviceContext& ctx, int64_t n, int64_t chunk, int64_t keep_bytes) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name + " params " + DTypeName(c.params) + " state " + DTypeName(c.state) +
                 (c.split ? " split" : "") + " keep " + std::to_string(keep_bytes));
    OptimizerOptions o;
    o.name = c.name;
    o.weight_decay = 0.01;
    o.grad_clip = 20.0;  // random grads of norm ~ sqrt(n): clipping is active
    if (c.name == "lion") o.beta2 = 0.99;
    o.param_dtype = c.params;
    o.state_dtype = c.state;
    o.split_masters = c.split;
    o.seed = 7;
    std::unique_ptr<Optimizer> in_place, offloaded;
    ASSERT_TRUE(Optimizer::Create(ctx, o, n, &in_place).ok());
    o.offload = true;
    o.offload_chunk = chunk;
    o.offload_keep_bytes = keep_bytes;
    ASSERT_TRUE(Optimizer::Create(ctx, o, n, &offloaded).ok());
    ASSERT_TRUE(offloaded->offloaded());
    const int64_t kept = offloaded->offloaded()->kept();
    EXPECT_EQ(kept, OffloadedState::KeepNumel(keep_bytes, OptimizerStateDTypes(*FindOptimAlgorithm(c.name), o), n));
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
      if (s == 1) ASSERT_TRUE(offloaded->SettleState().ok());
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
    ASSERT_EQ(offloaded->master_low() != nullptr, c.split);
    if (c.split) {
      EXPECT_FALSE(offloaded->master_low()->is_cuda());
      EXPECT_EQ(Bytes(ctx, *offloaded->master_low()), Bytes(ctx, *in_place->master_low()));
    }
    // The restore: a fresh optimizer keeping another part (half as much), its host state written, its step set.
    std::unique_ptr<Optimizer> fresh;
    o.offload_keep_bytes = keep_bytes / 2;
    ASSERT_TRUE(Optimizer::Create(ctx, o, n, &fresh).ok());
    const auto f = fresh->state();
    for (size_t i = 0; i < f.size(); ++i) ASSERT_TRUE(f[i].second->CopyFrom(*b[i].second, ctx.stream()).ok());
    if (c.split) ASSERT_TRUE(fresh->master_low()->CopyFrom(*offloaded->master_low(), ctx.stream()).ok());
    fresh->set_step(offloaded->step());
    Tensor p2;
    ASSERT_TRUE(Tensor::Empty({n}, c.params, ctx.allocator(), &p2).ok());
    ASSERT_TRUE(p2.CopyFrom(p1, ctx.stream()).ok());
    Tensor g = Random(ctx, n, DType::kF32, &rng);
    ASSERT_TRUE(in_place->Step(ctx, p0, g, 0.002).ok());
    ASSERT_TRUE(offloaded->Step(ctx, p1, g, 0.002).ok());
    ASSERT_TRUE(fresh->Step(ctx, p2, g, 0.002).ok());
    EXPECT_EQ(Bytes(ctx, p1), Bytes(ctx, p0));
    EXPECT_EQ(Bytes(ctx, p2), Bytes(ctx, p0));
    ASSERT_TRUE(offloaded->SettleState().ok());
    ASSERT_TRUE(fresh->SettleState().ok());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(Bytes(ctx, *b[i].second), Bytes(ctx, *a[i].second)) << a[i].first << " after the restore's step";
      EXPECT_EQ(Bytes(ctx, *f[i].second), Bytes(ctx, *a[i].second)) << a[i].first << " of the restored optimizer";
    }
    if (c.split) {
      EXPECT_EQ(Bytes(ctx, *offloaded->master_low()), Bytes(ctx, *in_place->master_low()));
      EXPECT_EQ(Bytes(ctx, *fresh->master_low()), Bytes(ctx, *in_place->master_low()));
    }
  }
}

// Segments (a ZeRO-1 shard's owned ranges): three ranges of a 120-element buffer whose state lies elsewhere in a
// 100-element state, in another order, updated through OffloadedState in chunks of `chunk` equal the algorithm's
// update of each range in place, bit for bit — AdamW with f32 and with bf16 state (the rounding's element index is
// the range's offset in the whole buffer), three steps; `keep` of the 100 state elements kept on the device.
void ExpectSegmentsEqualInPlace(DeviceContext& ctx, int64_t chunk, int64_t keep) {
  struct Range {
    int64_t offset, numel, state_offset;
  };
  const Range ranges[] = {{10, 37, 60}, {47, 3, 0}, {60, 50, 5}};
  constexpr int64_t kBuffer = 120, kState = 100;
  for (DType state_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string("state ") + DTypeName(state_dtype) + " chunk " + std::to_string(chunk) + " keep " +
                 std::to_string(keep));
    OptimizerOptions o;
    o.name = "adamw";
    o.weight_decay = 0.01;
    o.state_dtype = state_dtype;
    o.seed = 7;
    const OptimAlgorithmSpec* spec = nullptr;
    std::unique_ptr<OptimAlgorithm> algo;
    ASSERT_TRUE(CreateOptimAlgorithm(o, &spec, &algo).ok());
    std::unique_ptr<OffloadedState> off;
    ASSERT_TRUE(OffloadedState::Create(ctx, kState, {state_dtype, state_dtype}, chunk, keep, &off).ok());
    EXPECT_EQ(off->kept(), keep);
    std::vector<Tensor> state(2);
    for (Tensor& t : state) {
      ASSERT_TRUE(Tensor::Empty({kState}, state_dtype, ctx.allocator(), &t).ok());
      ASSERT_TRUE(t.SetZero(ctx.stream()).ok());
    }
    std::mt19937 rng(3);
    Tensor p0 = Random(ctx, kBuffer, DType::kF32, &rng), p1;
    ASSERT_TRUE(Tensor::Empty({kBuffer}, DType::kF32, ctx.allocator(), &p1).ok());
    ASSERT_TRUE(p1.CopyFrom(p0, ctx.stream()).ok());
    for (int step = 1; step <= 3; ++step) {
      Tensor g = Random(ctx, kBuffer, DType::kF32, &rng);
      algo->Prepare(0.01 / step, step, nullptr);
      std::vector<Tensor> p(3), q(3), gs(3), views(2);
      std::vector<Tensor*> view_ptrs = {&views[0], &views[1]};
      std::vector<OffloadedState::Segment> segments;
      for (int r = 0; r < 3; ++r) {
        const Range& x = ranges[r];
        ASSERT_TRUE(p0.View(x.offset, {x.numel}, &p[r]).ok());
        ASSERT_TRUE(p1.View(x.offset, {x.numel}, &q[r]).ok());
        ASSERT_TRUE(g.View(x.offset, {x.numel}, &gs[r]).ok());
        for (int k = 0; k < 2; ++k) ASSERT_TRUE(state[k].View(x.state_offset, {x.numel}, &views[k]).ok());
        ASSERT_TRUE(algo->Update(ctx, &p[r], gs[r], view_ptrs, nullptr, nullptr, nullptr, x.offset).ok());
        segments.push_back({&q[r], &gs[r], x.offset, x.state_offset});
      }
      ASSERT_TRUE(off->Update(ctx, *algo, segments, nullptr, nullptr, nullptr).ok());
      ASSERT_TRUE(ctx.Synchronize().ok());  // g goes out of scope
    }
    EXPECT_EQ(Bytes(ctx, p1), Bytes(ctx, p0));
    ASSERT_TRUE(off->Settle().ok());
    for (int k = 0; k < 2; ++k) EXPECT_EQ(Bytes(ctx, off->host()[k]), Bytes(ctx, state[k])) << spec->state_names[k];
  }
}

TEST(OffloadedState, CpuChunksEqualTheWholeBuffer) {
  std::unique_ptr<DeviceContext> ctx;
  ASSERT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  ExpectOffloadedEqualsInPlace(*ctx, 1003, 64, 0);  // 16 chunks, the last one partial
}

// 2,400 bytes kept: 300 elements of f32 AdamW (not a multiple of 64), 600 of bf16 or of a one-tensor state.
TEST(OffloadedState, CpuKeptPartEqualsTheWholeBuffer) {
  std::unique_ptr<DeviceContext> ctx;
  ASSERT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  ExpectOffloadedEqualsInPlace(*ctx, 1003, 64, 2400);
}

TEST(OffloadedState, CpuSegmentsEqualTheirRangesInPlace) {
  std::unique_ptr<DeviceContext> ctx;
  ASSERT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  for (int64_t keep : {0, 30, 100}) ExpectSegmentsEqualInPlace(*ctx, 8, keep);
}

TEST(OffloadedState, RingHoldsAtMostFourChunks) {
  EXPECT_EQ(OffloadedState::RingNumel(100, 64), 100);
  EXPECT_EQ(OffloadedState::RingNumel(1000, 64), 4 * 64);
  EXPECT_EQ(OffloadedState::RingNumel(int64_t{1} << 30, 0), 4 * OffloadedState::kDefaultChunk);
  EXPECT_EQ(OffloadedState::RingNumel(0, 64), 0);
}

TEST(OffloadedState, KeptElementsAreWhatTheBytesHold) {
  using D = DType;
  EXPECT_EQ(OffloadedState::KeepNumel(800, {D::kF32, D::kF32}, 1000), 100);
  EXPECT_EQ(OffloadedState::KeepNumel(801, {D::kBF16, D::kBF16}, 1000), 200);  // whole elements of every tensor only
  EXPECT_EQ(OffloadedState::KeepNumel(1000, {D::kF32, D::kF32, D::kBF16}, 1000), 100);  // split masters: 10 bytes
  EXPECT_EQ(OffloadedState::KeepNumel(int64_t{1} << 40, {D::kF32, D::kF32}, 1000), 1000);
  EXPECT_EQ(OffloadedState::KeepNumel(0, {D::kF32, D::kF32}, 1000), 0);
}

TEST(OffloadedStateCuda, StreamedRingEqualsStateOnTheDevice) {
  DT_SKIP_WITHOUT_GPU("the streamed update");
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  ExpectOffloadedEqualsInPlace(*gpu, 100003, 4096, 0);  // 25 chunks through 4 slots
}

// 40,000 f32 AdamW elements kept (9.8 chunks), the other 60,003 through the 4-slot ring, interleaved.
TEST(OffloadedStateCuda, KeptPartAndRingEqualStateOnTheDevice) {
  DT_SKIP_WITHOUT_GPU("the streamed update");
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  ExpectOffloadedEqualsInPlace(*gpu, 100003, 4096, 320000);
}

// Segments through the ring: chunks of 8 (a 32-element ring of 4 slots, refilled; chunks cut short at the segments'
// ends) and of 64 (a ring as large as the 100-element state: each chunk where the state has it).
TEST(OffloadedStateCuda, StreamedSegmentsEqualTheirRangesInPlace) {
  DT_SKIP_WITHOUT_GPU("the streamed update");
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  for (int64_t keep : {0, 30, 100}) {
    ExpectSegmentsEqualInPlace(*gpu, 8, keep);
    ExpectSegmentsEqualInPlace(*gpu, 64, keep);
  }
}

}  // namespace
}  // namespace dtrain::runtime
