// Deterministic random numbers that do not depend on the standard library's
// distributions (their output differs between implementations), so a seed gives
// the same dataset with any compiler: SplitMix64 for seeding and stream
// derivation, xoshiro256** for the stream, Box-Muller for normals.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace gait {

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A seed derived from several integers (seed, subject, sequence, ...), order-sensitive.
inline std::uint64_t derive_seed(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t state = 0x6a09e667f3bcc909ULL, out = 0;
  for (std::uint64_t p : parts) {
    state ^= p;
    out = splitmix64(state);
  }
  return out;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // n > 0; slight modulo bias is irrelevant at our n (< 2^20).
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  bool chance(double p) { return uniform() < p; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * 3.14159265358979323846 * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }
  double normal(double mean, double sd) { return mean + sd * normal(); }
  // Normal clipped to mean +- limit*sd (redrawn, not clamped), for plausible extremes.
  double clipped_normal(double mean, double sd, double limit) {
    for (;;) {
      const double z = normal();
      if (std::abs(z) <= limit) return mean + sd * z;
    }
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace gait
