#include "models/param_init.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/check.h"
#include "core/random.h"

namespace dtrain::models {
namespace {

// A range of one parameter's elements and the stream position of its first draw.
struct Piece {
  int64_t begin, end;  // flat element indices
  uint64_t draw;
  ParamInit init;
};

template <typename T>
void FillPiece(const Piece& p, uint64_t seed, T* out) {
  if (!p.init.normal) {
    std::fill(out + p.begin, out + p.end, static_cast<T>(p.init.value));
    return;
  }
  NormalSampler normal(seed);
  normal.Seek(p.draw);
  for (int64_t k = p.begin; k < p.end; ++k) out[k] = static_cast<T>(normal.Next() * p.init.value);
}

}  // namespace

Status FillParamInit(const std::vector<ParamInfo>& infos, const std::function<ParamInit(const ParamInfo&)>& rule,
                     uint64_t seed, Tensor* staging, int threads) {
  const bool f64 = staging->dtype() == DType::kF64;
  DT_CHECK_ARG((f64 || staging->dtype() == DType::kF32) && staging->device() == DeviceType::kCPU,
               "FillParamInit: staging must be f32 or f64 host memory, got " << staging->ToString());
  constexpr int64_t kPiece = int64_t{1} << 22;  // elements per task: small enough to balance 8e9 over the threads
  std::vector<Piece> pieces;
  uint64_t draw = 0;
  for (const ParamInfo& info : infos) {
    DT_CHECK_ARG(info.offset >= 0 && info.numel >= 0 && info.offset + info.numel <= staging->numel(),
                 "FillParamInit: parameter " << info.name << " lies outside the buffer");
    const ParamInit init = rule(info);
    for (int64_t k = 0; k < info.numel; k += kPiece) {
      const int64_t n = std::min(kPiece, info.numel - k);
      pieces.push_back({info.offset + k, info.offset + k + n, draw, init});
      if (init.normal) draw += static_cast<uint64_t>(n);
    }
  }
  const int n_threads =
      std::max(1, std::min<int>(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()),
                                static_cast<int>(pieces.size())));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      if (f64) {
        FillPiece(pieces[i], seed, staging->data<double>());
      } else {
        FillPiece(pieces[i], seed, staging->data<float>());
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return Status::OK();
}

}  // namespace dtrain::models
