// FillParamInit: the threaded fill equals the one-thread NormalSampler loop bit for bit (draws in parameter order,
// constants taking none), in f32 and f64, across piece and thread boundaries; NormalSampler::Seek lands on any draw.

#include "models/param_init.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"

namespace dtrain::models {
namespace {

TEST(NormalSampler, SeekLandsOnEveryDraw) {
  NormalSampler seq(99);
  std::vector<double> draws(41);
  for (double& d : draws) d = seq.Next();
  for (uint64_t i = 0; i < draws.size(); ++i) {
    NormalSampler s(99);
    s.Seek(i);
    EXPECT_EQ(s.Next(), draws[i]) << i;
    if (i + 1 < draws.size()) EXPECT_EQ(s.Next(), draws[i + 1]) << i;
  }
}

template <typename T>
void ExpectSameAsSequential(DType dt) {
  // Constants between normal tensors, odd sizes, one tensor over several 4M-element pieces.
  const std::vector<std::pair<std::string, int64_t>> shapes = {
      {"emb", 1001}, {"norm", 7}, {"w1", (int64_t{1} << 22) + 3}, {"bias", 5}, {"w2", 3}, {"norm2", 1}, {"w3", 999}};
  std::vector<ParamInfo> infos;
  int64_t off = 0;
  for (const auto& [name, n] : shapes) {
    infos.push_back({name, {n}, off, n});
    off += n;
  }
  auto rule = [](const ParamInfo& p) -> ParamInit {
    if (p.name.rfind("norm", 0) == 0) return {false, 1.0};
    if (p.name == "bias") return {false, 0.0};
    return {true, p.name == "w2" ? 0.5 : 0.02};
  };
  std::vector<T> want(off);
  NormalSampler normal(7);
  for (const ParamInfo& p : infos) {
    const ParamInit r = rule(p);
    for (int64_t k = 0; k < p.numel; ++k)
      want[p.offset + k] = static_cast<T>(r.normal ? normal.Next() * r.value : r.value);
  }
  CpuAllocator host;
  for (int threads : {1, 3, 8}) {
    Tensor staging;
    ASSERT_TRUE(Tensor::Empty({off}, dt, &host, &staging).ok());
    ASSERT_TRUE(FillParamInit(infos, rule, 7, &staging, threads).ok());
    const T* got = staging.data<T>();
    int64_t differ = 0;
    for (int64_t i = 0; i < off; ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0) << threads << " threads";
  }
}

TEST(FillParamInit, EqualsTheOneThreadLoopF32) { ExpectSameAsSequential<float>(DType::kF32); }
TEST(FillParamInit, EqualsTheOneThreadLoopF64) { ExpectSameAsSequential<double>(DType::kF64); }

TEST(FillParamInit, RefusesAParameterOutsideTheBuffer) {
  CpuAllocator host;
  Tensor staging;
  ASSERT_TRUE(Tensor::Empty({10}, DType::kF32, &host, &staging).ok());
  const Status st = FillParamInit(
      {{"w", {11}, 0, 11}},
      [](const ParamInfo&) {
        return ParamInit{true, 1.0};
      },
      1, &staging);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("w lies outside"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace dtrain::models
