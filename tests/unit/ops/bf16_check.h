// bf16 test helpers for the memory-bound op tests: exact bf16 data, a rounding oracle, the one-rounding bound.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "test_util.h"

// A namespace of its own (bf16check): the names are short and common.
namespace trainer::test::bf16_check {

// bf16 keeps 8 significant bits and rounds to nearest: a stored value is within kU of the float
// result relative to it (the unit roundoff). f32's is kF.
constexpr double kU = 0x1p-8, kF = 0x1p-24;

// The bf16 value nearest to v, ties to even, worked out in double (independently of the kernels'
// bit trick): the step is 2^(e-8) for |v| in [2^(e-1), 2^e), and 2^-133 below the smallest normal.
inline double round_bf16(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  int e;
  std::frexp(v, &e);
  int q = std::max(e, -125) - 8;
  double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);  // nearbyint: ties to even
  return std::fabs(r) >= 0x1p128 ? std::copysign(INFINITY, v) : r;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A host tensor of type dt holding v (for bf16 every value must be a bf16 value).
inline Tensor make(const Shape& s, DType dt, const ref::Vec& v) {
  if (dt == DType::F32) return from_vec(s, v);
  Tensor t = Tensor::empty(s, DType::BF16);
  uint32_t low = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = f32_bits(float(v[i]));
    low |= u & 0xffffu;
    t.as<uint16_t>()[i] = uint16_t(u >> 16);
  }
  REQUIRE(low == 0);  // no value lost bits
  return t;
}

inline double value(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F32 ? t.f32()[i] : f32_of(uint32_t(t.as<uint16_t>()[i]) << 16);
}

inline ref::Vec values(const Tensor& t) {
  ref::Vec v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = value(t, i);
  return v;
}

// Uniform random values in [lo, hi) representable in dt (bf16: f32 draws rounded).
inline ref::Vec random_values(const Shape& s, std::mt19937_64& rng, DType dt, double lo = -1.0, double hi = 1.0) {
  ref::Vec v = to_vec(random_tensor(s, rng, lo, hi));
  if (dt == DType::BF16)
    for (double& e : v) e = round_bf16(e);
  return v;
}

inline Tensor nan_of(const Shape& s, DType dt) { return make(s, dt, ref::Vec(size_t(s.numel()), NAN)); }

inline Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  if (t.bytes()) std::memcpy(c.data(), t.data(), t.bytes());
  return c;
}

inline double max_abs_or_1(const ref::Vec& v) {
  double m = 1;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// |got - want| <= rel |want| + abs for every element (a NaN fails). A bf16 store of an f32 result
// that is within e of want is within kU |want| + (1 + kU) e of it: callers pass rel = kU and
// abs = (1 + kU) e, with e the f32 path's error; 0 and 0 demand exact values.
inline void check_bound(const std::string& what, const Tensor& got, const ref::Vec& want, double rel, double abs) {
  REQUIRE(size_t(got.numel()) == want.size());
  double excess = -INFINITY;
  int64_t at = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double err = std::fabs(value(got, i) - want[size_t(i)]), b = rel * std::fabs(want[size_t(i)]) + abs;
    if (std::isnan(err)) err = INFINITY;
    if (err - b > excess) excess = err - b, at = i;
  }
  INFO(what << ": largest excess over the bound " << excess << " at " << at << " (" << want.size() << " values)");
  CHECK((got.numel() == 0 || excess <= 0));
}

// The bf16 kernels compute what the f32 ones do and round once: `bf` holds exactly the f32 path's
// result `f` (on the same values) rounded to bf16, bit for bit; f32 tensors must be identical.
inline void check_is_rounding_of(const std::string& what, const Tensor& bf, const Tensor& f) {
  REQUIRE(bf.numel() == f.numel());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < f.numel(); ++i) {
    uint32_t want = f32_bits(float(bf.dtype() == DType::BF16 ? round_bf16(f.f32()[i]) : f.f32()[i]));
    uint32_t got = f32_bits(float(value(bf, i)));
    if (got != want && !(std::isnan(f.f32()[i]) && std::isnan(value(bf, i)))) bad += 1, first = first < 0 ? i : first;
  }
  INFO(what << ": " << bad << " of " << f.numel() << " differ from the f32 path, first at " << first);
  CHECK(bad == 0);
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

}  // namespace trainer::test::bf16_check
