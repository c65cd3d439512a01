// Helpers of the kernel math tests (shared host/device functions checked on the CPU): the closeness measure, and checks that a bound is tight enough to catch a wrong formula.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace trainer::test::kmath {

// f32's unit roundoff 2^-24: the bounds below are small multiples of it (a few roundings of O(1)
// values), not the op tests' 1e-4.
constexpr double kU = 5.9604644775390625e-08;

// check_close's measure: max|got - want| / max(1, max|want|); a NaN in got (or a size mismatch)
// is infinitely far.
inline double scaled_err(const ref::Vec& got, const ref::Vec& want) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (!std::isnan(want[i])) err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

// got within tol (scaled_err), and a deliberately wrong formula's output `wrong` not: the bound
// would catch that mistake.
inline void check_tight(const std::string& what, const ref::Vec& got, const ref::Vec& want, double tol,
                        const ref::Vec& wrong) {
  const double e = scaled_err(got, want), w = scaled_err(wrong, want);
  INFO(what << ": scaled error " << e << ", bound " << tol << ", a wrong formula's error " << w);
  CHECK(e <= tol);
  CHECK(w > tol);
}

inline void check_within(const std::string& what, const ref::Vec& got, const ref::Vec& want, double tol) {
  const double e = scaled_err(got, want);
  INFO(what << ": scaled error " << e << ", bound " << tol << " (" << want.size() << " values)");
  CHECK(e <= tol);
}

// n uniform values in [lo, hi), as floats widened to double (the kernels' inputs are floats).
inline ref::Vec random_floats(size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  ref::Vec v(n);
  for (auto& x : v) x = double(float(u(rng)));
  return v;
}

inline std::vector<float> to_floats(const ref::Vec& v) { return std::vector<float>(v.begin(), v.end()); }

inline ref::Vec to_doubles(const std::vector<float>& v) { return ref::Vec(v.begin(), v.end()); }

// A loader (load(i) -> float) over a host array, as the kernels' loaders over device memory.
struct HostLoad {
  const float* p;
  float operator()(int64_t i) const { return p[i]; }
};

}  // namespace trainer::test::kmath
