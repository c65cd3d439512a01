// Low-precision test helpers (bf16 and f16): exact data, rounding oracles, the one-rounding bound, and the (backend, type) pairs under test.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../cpu_bf16.h"
#include "backends.h"
#include "test_util.h"

// A namespace of its own (bf16check): the names are short and common. The file keeps its first
// name; it now serves both low types: bf16 (8 significant bits, f32's exponent range) and IEEE
// half f16 (11 significant bits, normal range 2^-14 .. 65504, subnormals down to 2^-24).
namespace trainer::test::bf16_check {

// The unit roundoff of each type: a stored value is within unit(t) of the float result relative
// to it (round to nearest).
constexpr double kU = 0x1p-8, kU16 = 0x1p-11, kF = 0x1p-24;
inline double unit(DType t) { return t == DType::BF16 ? kU : t == DType::F16 ? kU16 : kF; }
// ... except below the smallest normal, where the step is fixed (the subnormal spacing) and a
// rounding is off by up to half of it whatever the value: fl(v) = v(1 + d) + e, |d| <= unit(t),
// |e| <= underflow(t). For f16 that is 2^-25 (3e-8): a gradient of 1e-6 stored in f16 is
// within 2^-25 of its f32 value, not within 2^-11 of it (the first GPU run of the f16 tests,
// 2026-11-26, met exactly this excess in sigmoid/tanh dx, accumulate and avg pooling's dx).
inline double underflow(DType t) { return t == DType::BF16 ? 0x1p-134 : t == DType::F16 ? 0x1p-25 : 0x1p-150; }

// The value of type t nearest to v, ties to even, worked out in double (independently of the
// kernels' conversions): the step is 2^(e-p) for |v| in [2^(e-1), 2^e), with p the significant bits,
// and the subnormal step below the smallest normal; past the largest finite value: infinity.
inline double round_to(DType t, double v) {
  if (t == DType::F32) return double(float(v));
  if (!std::isfinite(v) || v == 0) return v;
  const int p = t == DType::BF16 ? 8 : 11, emin = t == DType::BF16 ? -125 : -13;
  const double inf_at = t == DType::BF16 ? 0x1p128 : 0x1p16;
  int e;
  std::frexp(v, &e);
  int q = std::max(e, emin) - p;
  double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);  // nearbyint: ties to even
  return std::fabs(r) >= inf_at ? std::copysign(INFINITY, v) : r;
}
inline double round_bf16(double v) { return round_to(DType::BF16, v); }

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

// IEEE half bits of a value that is exactly representable (or infinite or NaN), and back.
inline uint16_t f16_bits(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  if (std::isnan(v)) return 0x7e00u;
  if (std::isinf(v)) return uint16_t(sign | 0x7c00u);
  const double a = std::fabs(v);
  if (a == 0) return sign;
  int e;
  double f = std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
  if (e <= -14) return uint16_t(sign | uint16_t(std::ldexp(a, 24)));  // subnormal: a / 2^-24
  return uint16_t(sign | uint16_t((e + 14) << 10) | uint16_t(std::ldexp(f, 11) - 1024.0));
}
inline double f16_value(uint16_t b) {
  const double s = (b & 0x8000u) ? -1.0 : 1.0;
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  if (e == 0x1f) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp(double(m), -24);
  return s * std::ldexp(double(m + 1024), e - 25);
}

// A host tensor of type dt holding v (for bf16 and f16 every value must be one of the type's).
inline Tensor make(const Shape& s, DType dt, const ref::Vec& v) {
  if (dt == DType::F32) return from_vec(s, v);
  Tensor t = Tensor::empty(s, dt);
  bool exact = true;
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::BF16) {
      uint32_t u = f32_bits(float(v[i]));
      exact &= (u & 0xffffu) == 0 || std::isnan(v[i]);
      t.as<uint16_t>()[i] = uint16_t(u >> 16);
    } else {
      exact &= std::isnan(v[i]) || round_to(DType::F16, v[i]) == v[i];
      t.as<uint16_t>()[i] = f16_bits(v[i]);
    }
  }
  REQUIRE(exact);  // no value lost bits
  return t;
}

inline double value(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::F32) return t.f32()[i];
  const uint16_t b = t.as<uint16_t>()[i];
  return t.dtype() == DType::BF16 ? double(f32_of(uint32_t(b) << 16)) : f16_value(b);
}

inline ref::Vec values(const Tensor& t) {
  ref::Vec v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = value(t, i);
  return v;
}

// Uniform random values in [lo, hi) representable in dt (f32 draws rounded).
inline ref::Vec random_values(const Shape& s, std::mt19937_64& rng, DType dt, double lo = -1.0, double hi = 1.0) {
  ref::Vec v = to_vec(random_tensor(s, rng, lo, hi));
  if (dt != DType::F32)
    for (double& e : v) e = round_to(dt, e);
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

// |got - want| <= rel |want| + abs (+ underflow(type) when rel > 0) for every element (a NaN
// fails). A low-precision store of an f32 result that is within e of want is within
// u |want| + (1 + u) e + underflow of it: callers pass rel = u and abs = (1 + u) e, with e the f32
// path's error; 0 and 0 demand exact values.
inline void check_bound(const std::string& what, const Tensor& got, const ref::Vec& want, double rel, double abs) {
  REQUIRE(size_t(got.numel()) == want.size());
  const double eta = rel > 0 ? underflow(got.dtype()) : 0.0;  // a rounding (rel > 0) may underflow
  double excess = -INFINITY;
  int64_t at = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double err = std::fabs(value(got, i) - want[size_t(i)]), b = rel * std::fabs(want[size_t(i)]) + abs + eta;
    if (std::isnan(err)) err = INFINITY;
    if (err - b > excess) excess = err - b, at = i;
  }
  INFO(what << ": largest excess over the bound " << excess << " at " << at << " (" << want.size() << " values)");
  CHECK((got.numel() == 0 || excess <= 0));
}

// The low-precision kernels compute what the f32 ones do and round once: `lo` holds exactly the f32
// path's result `f` (on the same values) rounded to lo's type, bit for bit; f32 tensors must be
// identical.
inline void check_is_rounding_of(const std::string& what, const Tensor& lo, const Tensor& f) {
  REQUIRE(lo.numel() == f.numel());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < f.numel(); ++i) {
    const double want = round_to(lo.dtype(), f.f32()[i]), got = value(lo, i);
    const bool same = want == got || (std::isnan(want) && std::isnan(got));
    if (!same) bad += 1, first = first < 0 ? i : first;
  }
  INFO(what << ": " << bad << " of " << f.numel() << " differ from the f32 path, first at " << first);
  CHECK(bad == 0);
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Where low-precision rounding enters one output: how many of the two operands of each product
// the kernel rounds to the low type (operands given in it are exact), whether the output is
// stored in it, and that type's unit roundoff.
struct Rounding {
  int operands = 0;
  bool bf16_out = false;
  double u = 0x1p-8;
};

// The error bound of one output element that sums `terms` products a·b (plus maybe a bias), where
// `mag` is Σ|a·b| (+|bias|): the float64 reference run on absolute values; `want` is its value.
//   Rounded operands: rounding to bf16 (8 significant bits, round to nearest even) is off by at
//   most u = 2^-8 relatively (f16: 11 bits, u = 2^-11, for values in its normal range, as these
//   are), so a product with one rounded operand is off by <= u|a·b|, with two by <= (2u +
//   u^2)|a·b|: ((1 + u)^operands - 1)|a·b|.
//   Accumulation: a product of two bf16 values is exact in f32, and accumulating `terms` of them in
//   f32 in any order adds <= terms · 2^-24 · Σ|a·b|; 2^-23 per term (and one more for the bias)
//   covers the growth of the rounded terms and a separately rounded product. This alone is the
//   fp32 bound.
//   Low-precision output: the f32 result r is rounded once more, off by <= u|r| <= u(|want| + the above).
//   (cuDNN on the GPU: tensor-core products of bf16/f16 operands are exact in fp32 and accumulate
//   in fp32, so the same terms apply; its weight gradient comes out in the low type: rounded.)
// The bound is the worst case of every rounding going the same way: random data reaches about half
// of it (0.54: dense's dx, both operands rounded; 0.45: conv2d's bf16 y and dx) and typically
// 0.1-0.5, while a wrong index, a missing tap or channel, or a misplaced gradient makes errors of
// the order of the outputs themselves.
inline double bound(Rounding r, int64_t terms, double mag, double want) {
  double b = (std::pow(1 + r.u, r.operands) - 1 + double(terms + 1) * 0x1p-23) * mag;
  return r.bf16_out ? b + r.u * (std::fabs(want) + b) : b;
}

// Checks every element of `got` (f32 or bf16) against the reference `want` within bound(r, terms,
// mag[i], want[i]), and returns the largest relative error |got - want| / mag seen.
inline double check_bound(const std::string& what, Rounding r, const Tensor& got, const ref::Vec& want, const ref::Vec& mag,
                   int64_t terms) {
  REQUIRE(size_t(got.numel()) == want.size());
  ref::Vec g = values(got);
  double worst = 0, rel = 0, fraction = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(g[i] - want[i]), b = bound(r, terms, mag[i], want[i]);
    if (std::isnan(err)) err = INFINITY;
    if (mag[i] > 0) rel = std::max(rel, err / mag[i]);
    if (b > 0) fraction = std::max(fraction, err / b);
    if (err - b > worst) worst = err - b, at = i;
  }
  INFO(what << " (" << r.operands << " operands rounded" << (r.bf16_out ? ", low-precision output" : "") << ", " << terms
            << " terms): largest excess over the bound " << worst << " at " << at << "; largest relative error " << rel
            << ", largest fraction of the bound " << fraction);
  CHECK(worst <= 0);
  return rel;
}

// --- What runs: every backend (backends.h) with each low type it supports -----------------------

// One (backend, low type) pair: the backend's fp32 context for the memory-bound ops (their
// kernels take any float type), and a context of the low precision for the ops whose arithmetic
// depends on it (dense rounds its f32 operands there).
struct Low {
  const Backend* be;
  DType type;              // BF16 or F16
  OpContext* low_context;  // precision bf16 / fp16 on the same device
  std::string name() const { return be->name + " " + dtype_name(type); }
  OpContext& ctx() const { return be->ctx(); }
  OpContext& lctx() const { return *low_context; }
  double u() const { return unit(type); }
  // Host tensor <-> device (copies; the checks run on host tensors). Each context has its own
  // stream and allocator: a tensor given to a kernel must be copied, allocated and read back
  // through that kernel's context, or nothing orders the copies against the kernel (and a freed
  // temporary could go back to one allocator while the other stream still reads it). up/down
  // serve kernels made on ctx(); up(c, h)/down(c, d) any context (e.g. lctx()).
  Tensor up(const Tensor& h) const { return to_device(ctx(), h); }
  Tensor down(const Tensor& d) const { return to_host(ctx(), d); }
  static Tensor up(OpContext& c, const Tensor& h) { return to_device(c, h); }
  static Tensor down(OpContext& c, const Tensor& d) { return to_host(c, d); }
};

namespace detail {

inline std::vector<Low> find_lows(const std::vector<Backend>& chosen) {
  std::vector<Low> out;
  for (const Backend& be : chosen) {
    auto ctx_for = [&](Precision p) {
      // Deliberately never destroyed, as backends.h's contexts (see there).
      OpContext* c = make_context(be.ctx().device(), ContextOptions{be.is_cpu() ? 2 : 0, p}).release();
      c->bind_thread();
      return c;
    };
    if (be.is_cpu()) {
      if (cpu_bf16_refusal().empty()) out.push_back({&be, DType::BF16, ctx_for(Precision::BF16)});  // fp16 is GPU-only
      be.ctx().bind_thread();
      continue;
    }
#ifdef TRAINER_HAVE_CUDA
    // bf16 needs compute capability 8.0 (the context refuses it below); f16 runs everywhere.
    for (const GpuInfo& g : cuda_devices())
      if (Device::cuda(g.index) == be.ctx().device() && g.cc_major >= 8)
        out.push_back({&be, DType::BF16, ctx_for(Precision::BF16)});
    out.push_back({&be, DType::F16, ctx_for(Precision::FP16)});
#endif
  }
  return out;
}

}  // namespace detail

// The pairs under test, of the backends a [backends] test case runs on (backends()): cpu bf16
// where the CPU runs it (else a skip is recorded, Missing::CpuFeature); on a visible GPU, its bf16
// (compute capability >= 8.0) and f16. A test runs one Catch2 SECTION per pair:
//   for (const Low& lo : lows()) SECTION(lo.name()) {...}
// so a test case that calls it checks low precision only: its f32 checks are a test case of their own.
inline const std::vector<Low>& lows() {
  const std::vector<Backend>& chosen = backends();
  // Never destroyed either: the contexts stay reachable from it for LeakSanitizer's check at exit.
  static const std::vector<Low>* found = new std::vector<Low>(detail::find_lows(chosen));
  for (const Backend& be : chosen)
    if (be.is_cpu() && !cpu_bf16_refusal().empty()) record_skip(Missing::CpuFeature, cpu_bf16_skip_message());
  return *found;
}

}  // namespace trainer::test::bf16_check
