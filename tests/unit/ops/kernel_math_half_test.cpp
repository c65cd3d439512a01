// Kernel math: the bf16 and f16 roundings of half_bits.h (the CPU's bf16 stores and every CUDA low-precision store) against a float64 nearest-value search, and a clamp's gate before such a store.
#include "core/ops/math/half_bits.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/math/activation_math.h"
#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
namespace hb = trainer::half_bits;

namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
float from_bits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// A 16-bit format's finite non-negative values in increasing order (index = bit pattern) and the
// magnitude from which IEEE rounding gives infinity (the largest value plus half its ulp: a tie
// there goes to infinity, the largest value's mantissa being odd).
struct Format {
  std::vector<double> vals;
  double overflow;
  uint16_t inf;
  std::function<float(uint16_t)> widen;
};

Format make_format(uint16_t last_finite, uint16_t inf, std::function<float(uint16_t)> widen) {
  Format f;
  for (uint32_t k = 0; k <= last_finite; ++k) f.vals.push_back(widen(uint16_t(k)));
  const double top = f.vals[last_finite], ulp = top - f.vals[last_finite - 1];
  f.overflow = top + ulp / 2;
  f.inf = inf;
  f.widen = widen;
  return f;
}

const Format& bf16_format() {
  static const Format f = make_format(0x7f7f, 0x7f80, hb::f32_from_bf16);
  return f;
}
const Format& f16_format() {
  static const Format f = make_format(0x7bff, 0x7c00, hb::f32_from_f16);
  return f;
}

// The float64 answer for a non-NaN x: the nearest value, ties to the even pattern, overflow to inf.
uint16_t nearest(const Format& f, float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a >= f.overflow) return sign | f.inf;
  const size_t k = size_t(std::upper_bound(f.vals.begin(), f.vals.end(), a) - f.vals.begin()) - 1;
  if (k + 1 == f.vals.size()) return uint16_t(sign | k);  // between the largest value and the overflow point
  const double lo = a - f.vals[k], hi = f.vals[k + 1] - a;
  const size_t pick = lo < hi ? k : hi < lo ? k + 1 : (k % 2 == 0 ? k : k + 1);
  return uint16_t(sign | pick);
}

// f32 inputs that probe a format: a sweep of every 4093rd bit pattern (all exponents, both
// signs), and around every tie: each midpoint between neighbouring values and the f32 values on
// either side of it.
std::vector<float> probes(const Format& f) {
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) xs.push_back(from_bits(uint32_t(u)));
  for (size_t k = 0; k + 1 < f.vals.size(); ++k) {
    const float mid = float((f.vals[k] + f.vals[k + 1]) / 2);
    REQUIRE(double(mid) == (f.vals[k] + f.vals[k + 1]) / 2);  // exact in f32 (both formats are narrower)
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  const float top = float(f.overflow);
  for (float x : {top, std::nextafter(top, 0.0f), std::nextafter(top, INFINITY), INFINITY, 0.0f, -0.0f})
    xs.push_back(x);
  return xs;
}

// How many of the probes `round` rounds differently from the float64 nearest search.
int64_t mismatches(const Format& f, const std::vector<float>& xs, const std::function<uint16_t(float)>& round) {
  int64_t bad = 0;
  for (float x : xs)
    if (!std::isnan(x) && round(x) != nearest(f, x)) ++bad;
  return bad;
}

}  // namespace

TEST_CASE("kernel math: bf16 rounding is the nearest bf16, ties to even, on a sweep of f32 and every tie") {
  const Format& f = bf16_format();
  const std::vector<float> xs = probes(f);
  INFO(xs.size() << " probes");
  CHECK(mismatches(f, xs, hb::bf16_from_f32) == 0);
  // The CPU's bf16 store is this function (cpu_bf16.h).
  int64_t cpu_differs = 0;
  for (float x : xs) cpu_differs += cpu::round_bf16(x).bits != hb::bf16_from_f32(x);
  CHECK(cpu_differs == 0);
  // The check catches a truncation and a round-half-away-from-zero.
  CHECK(mismatches(f, xs, [](float x) { return uint16_t(bits(x) >> 16); }) > 0);
  CHECK(mismatches(f, xs, [](float x) { return uint16_t((bits(x) + 0x8000u) >> 16); }) > 0);
}

TEST_CASE("kernel math: f16 rounding is the nearest f16, ties to even, with subnormals and overflow to inf") {
  const Format& f = f16_format();
  const std::vector<float> xs = probes(f);
  INFO(xs.size() << " probes");
  CHECK(mismatches(f, xs, hb::f16_from_f32) == 0);
  CHECK(hb::f16_from_f32(65504.0f) == 0x7bff);
  CHECK(hb::f16_from_f32(65519.996f) == 0x7bff);
  CHECK(hb::f16_from_f32(65520.0f) == 0x7c00);
  CHECK(hb::f16_from_f32(-1e30f) == 0xfc00);
  CHECK(hb::f16_from_f32(5.9604644775390625e-8f) == 0x0001);       // 2^-24, the smallest subnormal
  CHECK(hb::f16_from_f32(2.98023223876953125e-8f) == 0x0000);      // 2^-25: a tie, to even (0)
  CHECK(hb::f16_from_f32(2.98023259404089301e-8f) == 0x0001);      // just above it
  CHECK(hb::f16_from_f32(6.1035156e-05f) == 0x0400);               // 2^-14, the smallest normal
#if defined(__FLT16_MAX__)
  // A second opinion where the compiler has _Float16 (GCC 12 on x86-64: libgcc's conversion).
  int64_t differs = 0;
  for (float x : xs) {
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    differs += b != hb::f16_from_f32(x);
  }
  CHECK(differs == 0);
#endif
  // A rounding that ignores ties (half away from zero on the normal path) is caught.
  CHECK(mismatches(f, xs, [](float x) {
          const uint32_t u = bits(x), a = u & 0x7fffffffu;
          if (a < 0x38800000u || a >= 0x477ff000u) return hb::f16_from_f32(x);
          return uint16_t(((u >> 16) & 0x8000u) | ((a - 0x38000000u + 0x1000u) >> 13));
        }) > 0);
}

TEST_CASE("kernel math: bf16 and f16 widen exactly and every 16-bit pattern survives a round trip") {
  int64_t bad_bf16 = 0, bad_f16 = 0;
  for (uint32_t k = 0; k < 0x10000; ++k) {
    const uint16_t b = uint16_t(k);
    const float vb = hb::f32_from_bf16(b), vh = hb::f32_from_f16(b);
    // bf16: the upper half of an f32, as is.
    bad_bf16 += bits(vb) != (k << 16);
    if (std::isnan(vb)) bad_bf16 += !std::isnan(from_bits(uint32_t(hb::bf16_from_f32(vb)) << 16));
    else bad_bf16 += hb::bf16_from_f32(vb) != b;
    // f16: the value its fields say (float64), and back.
    const int e = (k >> 10) & 0x1f, m = k & 0x3ff;
    const double want = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
    const double sv = (k & 0x8000) ? -want : want;
    if (std::isnan(sv)) {
      bad_f16 += !std::isnan(vh);
      bad_f16 += (hb::f16_from_f32(vh) & 0x7e00) != 0x7e00;  // still a NaN, and quiet
      bad_f16 += (hb::f16_from_f32(vh) & 0x8000) != (k & 0x8000);
    } else {
      bad_f16 += double(vh) != sv || std::signbit(vh) != bool(k & 0x8000);
      bad_f16 += hb::f16_from_f32(vh) != b;
    }
  }
  CHECK(bad_bf16 == 0);
  CHECK(bad_f16 == 0);
  // NaN in, quiet NaN out, sign kept.
  const float snan = from_bits(0xff800001u);
  CHECK((hb::bf16_from_f32(snan) & 0xffc0) == 0xffc0);
  CHECK((hb::f16_from_f32(snan) & 0xfe00) == 0xfe00);
}

// Batch norm's fused ReLU/ReLU6 decides its backward gate from the value before the clamp and the
// low-precision store (cpu_batchnorm.cpp): act::rounded_gate must agree with the gradient taken
// from the stored y on every probe, around the gate's own bounds, and on NaN.
TEST_CASE("kernel math: a clamp's gate before a bf16 or f16 store decides as the gradient through the stored y") {
  using RoundFn = float (*)(float);
  const RoundFn round_bf16 = [](float v) { return cpu::to_f32(cpu::round_bf16(v)); };
  const RoundFn round_f16 = [](float v) { return hb::f32_from_f16(hb::f16_from_f32(v)); };
  const RoundFn identity = [](float v) { return v; };
  struct Case {
    const char* name;
    RoundFn round;
    const Format* format;
  };
  for (const Case& k : {Case{"bf16", round_bf16, &bf16_format()}, Case{"f16", round_f16, &f16_format()},
                        Case{"f32", identity, &bf16_format()}}) {
    for (ActKind a : {ActKind::Relu, ActKind::Relu6, ActKind::Linear}) {
      INFO(k.name << ", " << activation_name(a));
      const act::Clamp c = act::clamp_of(a), g = act::rounded_gate(c, k.round);
      std::vector<float> xs = probes(*k.format);
      for (float b : {g.lo, g.hi, c.lo, c.hi})
        for (float x : {b, std::nextafter(b, -INFINITY), std::nextafter(b, INFINITY)}) xs.push_back(x);
      xs.push_back(NAN);
      xs.push_back(-NAN);
      int64_t bad = 0, passed = 0;
      for (float v : xs) {
        const bool want = act::through(1.0f, k.round(act::clamp(v, c)), c) != 0.0f;
        bad += (v > g.lo && v < g.hi) != want;
        passed += want;
      }
      CHECK(bad == 0);
      CHECK(passed > 0);
    }
  }
  // By hand: bf16 rounds (0, 2^-134] to 0 and [5.984375, 6) to 6 (the tie goes to 6, whose
  // mantissa is even); f16 rounds (0, 2^-25] to 0 and [5.998046875, 6) to 6; f32 keeps the bounds.
  const act::Clamp relu6 = act::clamp_of(ActKind::Relu6);
  CHECK(act::rounded_gate(relu6, round_bf16).lo == 0x1p-134f);
  CHECK(act::rounded_gate(relu6, round_bf16).hi == 5.984375f);
  CHECK(act::rounded_gate(relu6, round_f16).lo == 0x1p-25f);
  CHECK(act::rounded_gate(relu6, round_f16).hi == 5.998046875f);
  CHECK(act::rounded_gate(relu6, identity).lo == 0.0f);
  CHECK(act::rounded_gate(relu6, identity).hi == 6.0f);
  // A bound the store cannot keep has no such gate.
  CHECK_THROWS_AS(act::rounded_gate(act::Clamp{0.1f, HUGE_VALF}, round_bf16), std::invalid_argument);
}
