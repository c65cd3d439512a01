// Shared helpers for the op tests: random host tensors, float64 conversion, the closeness check and
// its bound per backend (the backends themselves are in backends.h).
#pragma once
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ops/context.h"
#include "reference.h"

namespace trainer::test {

// The closeness bound of check_close for each backend, in one place (see check_close).
// CPU (oneDNN fp32, float accumulation).
constexpr double kCpuTolerance = 1e-4;
// CUDA (cuDNN/cuBLAS fp32 with the default math mode, which is not TF32): the CPU bound until the
// first GPU runs say otherwise.
constexpr double kCudaTolerance = 1e-4;

// One CPU context (two compute threads) for all op tests.
inline OpContext& cpu_ctx() {
  static std::unique_ptr<OpContext> c = make_context(Device::cpu(), ContextOptions{2});
  return *c;
}

// Host tensors (test data and reference values; backends.h moves them to and from a device).
inline Tensor random_tensor(const Shape& s, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(s);
  std::uniform_real_distribution<double> u(lo, hi);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(u(rng));
  return t;
}

inline Tensor from_vec(const Shape& s, const ref::Vec& v) {
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(v[size_t(i)]);
  return t;
}

inline ref::Vec to_vec(const Tensor& t) {
  ref::Vec v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.f32()[i];
  return v;
}

// Fills a host tensor with NaN so that elements a kernel fails to write are caught.
inline void poison(Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::nanf("");
}

// The closeness metric used by every op test: max|got - ref| <= tol * max(1, max|ref|), i.e. an
// absolute error bound for values of order one and a relative bound (to the largest reference value)
// for larger outputs. A NaN anywhere fails.
inline void check_close(const std::string& what, const Tensor& got, const ref::Vec& want, double tol = kCpuTolerance) {
  REQUIRE(size_t(got.numel()) == want.size());
  double err = 0, scale = 1;
  bool nan = false;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got.f32()[i];
    if (std::isnan(g)) nan = true;
    err = std::max(err, std::fabs(g - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  INFO(what << ": max abs error " << err << ", bound " << tol * scale << " (" << want.size() << " values)");
  CHECK(!nan);
  CHECK(err <= tol * scale);
}

inline void check_close(const std::string& what, const ref::Vec& got, const ref::Vec& want,
                        double tol = kCpuTolerance) {
  REQUIRE(got.size() == want.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    if (std::isnan(got[i])) err = INFINITY;
    scale = std::max(scale, std::fabs(want[i]));
  }
  INFO(what << ": max abs error " << err << ", bound " << tol * scale);
  CHECK(err <= tol * scale);
}

inline int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

}  // namespace trainer::test
