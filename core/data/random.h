// Counter-based random numbers: each stream a pure function of its keys (seed, epoch, index...).
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace trainer {

// SplitMix64's finaliser: a bijective 64-bit mix with full avalanche.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A small generator (SplitMix64) keyed by a tuple, so that e.g. the augmentation of sample i in
// epoch e is Rng{tag, seed, e, i} whatever thread draws it and in whatever order. Not for crypto.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(mix64(seed)) {}
  Rng(std::initializer_list<uint64_t> keys) {
    uint64_t h = 0x243f6a8885a308d3ULL;  // pi: distinct from Rng(0)
    for (uint64_t k : keys) h = mix64(h ^ mix64(k));
    state_ = h;
  }
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi] (inclusive); multiply-shift, bias < 2^-32 for the ranges used here.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    uint64_t n = uint64_t(hi - lo) + 1;
    return lo + int64_t((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  bool coin() { return (next() >> 63) != 0; }
  // Standard normal (Box-Muller; one value per call, simple over fast).
  double normal() {
    double u1 = 1.0 - uniform(), u2 = uniform();  // u1 in (0, 1]
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace trainer
