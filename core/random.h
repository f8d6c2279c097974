#pragma once
// SplitMix64: a tiny, fully specified PRNG whose output is identical on every platform and
// standard library (unlike std::uniform_*_distribution). Used wherever dtrain needs the same
// random numbers on every rank and across runs: parameter init, data order.

#include <cmath>
#include <cstdint>

namespace dtrain {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n) (Lemire's multiply-shift; bias < 2^-64 * n, negligible).
  uint64_t Below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64); }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// Standard normals from SplitMix64 by Box-Muller, both outputs of each pair used: identical on every platform
// (unlike std::normal_distribution). The GPT-2 and Llama inits draw from it.
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed), seed_(seed) {}
  // Positions the sampler so that the next Next() returns draw number `index` (0-based) of a fresh sampler with the
  // same seed: SplitMix64's state after k outputs is seed + k * its increment, and draw 2j, 2j + 1 come from outputs
  // 2j, 2j + 1. Lets several threads produce disjoint ranges of one stream, bit for bit.
  void Seek(uint64_t index) {
    rng_ = SplitMix64(seed_ + (index / 2) * 2 * 0x9E3779B97F4A7C15ull);
    has_spare_ = false;
    if (index % 2 == 1) Next();
  }
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - rng_.Uniform();  // (0, 1]: log is finite
    const double u2 = rng_.Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * 3.14159265358979323846 * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  SplitMix64 rng_;
  uint64_t seed_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace dtrain
