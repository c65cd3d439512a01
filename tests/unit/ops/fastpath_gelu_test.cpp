// GELU's fast path (oneDNN's eltwise gelu_erf / gelu_tanh, f32 and bf16) against its reference (the libm loop, every fast path off) and float64, at 1 to 3 threads, in place too.
//
// Both paths are measured against float64 GELU and its derivative, in units of u·scale (u = 2^-24,
// f32's unit roundoff; scale |gelu(x)| + |x| for y, |dy|·(|gelu'(x)| + 1) for dx): the size of the
// rounding x/2·(1 + erf(x/√2)) itself carries, whose 1 + erf cancels in the negative tail (gelu(-5)
// ~ -1.4e-6 from 1 - 0.99999943), so a relative error there says nothing. The reference path (glibc's
// erff, expf, tanhf) stays within kRefBound units; oneDNN's polynomial approximations within
// kFastBound (measured here, 2026-11-29, AVX2: reference <= 1.0 (y) and 9.1 (dx, tanh form), oneDNN
// <= 2.7 (y) and 12.6 (dx, tanh form); the bounds leave room
// for another CPU's JIT code path). Results must not depend on the thread count, bit for bit.
#include <cmath>
#include <random>

#include "../cpu_bf16.h"
#include "backends.h"
#include "bf16_check.h"
#include "core/ops/activation.h"

using namespace trainer;
using namespace trainer::test;

namespace {

constexpr double kRefBound = 16, kFastBound = 32;  // units of u·scale

double gelu64(double x, bool exact) {
  if (exact) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu64_grad(double x, bool exact) {
  if (exact) return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  const double t = std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// Inputs where GELU bends (|x| < 4), its tails, tiny and exact values.
std::vector<float> inputs(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> z(0, 1);
  const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 0.5f, -0.5f, 3.0f, -3.0f, 8.0f, -8.0f, 30.0f, -30.0f};
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = i < std::size(special) ? special[i] : z(rng) * (i % 3 == 0 ? 4.0f : 1.5f);
  return x;
}

struct Run {
  std::vector<float> y, dx;
};

Run run(bool fast, int threads, ActKind kind, const std::vector<float>& x, const std::vector<float>& dy, bool in_place) {
  ContextOptions o;
  o.threads = threads;
  o.fast = fast ? FastPaths::all() : FastPaths::none();
  auto ctx = make_context(Device::cpu(), o);
  auto k = make_kernel<ActivationKernel>(*ctx, ActivationParams{kind});
  const Shape s{int64_t(x.size())};
  Tensor tx = Tensor::empty(s), tdy = Tensor::empty(s);
  std::copy(x.begin(), x.end(), tx.f32());
  std::copy(dy.begin(), dy.end(), tdy.f32());
  Tensor y = in_place ? Tensor::empty(s) : Tensor::empty(s), dx = in_place ? tdy : Tensor::empty(s);
  Tensor keep = Tensor::empty(s);  // x, for the backward (an in-place forward overwrites it)
  std::copy(x.begin(), x.end(), keep.f32());
  if (in_place) {
    k->forward(tx, tx);
    y = tx;
  } else {
    k->forward(tx, y);
  }
  k->backward(keep, y, tdy, dx);
  return {std::vector<float>(y.f32(), y.f32() + y.numel()), std::vector<float>(dx.f32(), dx.f32() + dx.numel())};
}

// The largest error of `got` against float64, in units of u·scale (above).
double worst(const std::vector<float>& got, const std::vector<float>& x, const std::vector<float>& dy, bool grad, bool exact) {
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = gelu64_grad(x[i], exact);
    const double want = grad ? g * dy[i] : gelu64(x[i], exact);
    const double scale = grad ? std::fabs(double(dy[i])) * (std::fabs(g) + 1) : std::fabs(want) + std::fabs(double(x[i]));
    const double err = std::fabs(double(got[i]) - want);
    if (err > 0) w = std::max(w, err / (std::ldexp(1.0, -24) * std::max(scale, std::ldexp(1.0, -126))));
  }
  return w;
}

}  // namespace

TEST_CASE("fast path gelu: oneDNN's eltwise against the libm loop and float64, both forms, 1-3 threads, in place") {
  std::mt19937_64 rng(20261129);
  for (ActKind kind : {ActKind::Gelu, ActKind::GeluTanh}) {
    const bool exact = kind == ActKind::Gelu;
    for (size_t n : {size_t(1), size_t(15), size_t(1000), size_t(70001)}) {
      const std::vector<float> x = inputs(n, rng);
      std::vector<float> dy(n);
      std::normal_distribution<float> z(0, 1);
      for (float& g : dy) g = z(rng);
      const Run ref = run(false, 2, kind, x, dy, false);
      const Run fast1 = run(true, 1, kind, x, dy, false);
      INFO((exact ? "exact" : "tanh form") << ", " << n << " elements");
      const double ry = worst(ref.y, x, dy, false, exact), rd = worst(ref.dx, x, dy, true, exact);
      const double fy = worst(fast1.y, x, dy, false, exact), fd = worst(fast1.dx, x, dy, true, exact);
      WARN((exact ? "gelu exact" : "gelu tanh") << " n=" << n << ": reference y " << ry << ", dx " << rd
                                                << "; oneDNN y " << fy << ", dx " << fd << " (units of u·scale against float64)");
      CHECK(ry <= kRefBound);
      CHECK(rd <= kRefBound);
      CHECK(fy <= kFastBound);
      CHECK(fd <= kFastBound);
      if (n >= 1000) CHECK(fast1.y != ref.y);  // the fast path ran: its approximations round otherwise somewhere
      for (int threads : {2, 3}) {
        const Run other = run(true, threads, kind, x, dy, threads == 3);  // 3 threads: in place
        CHECK(other.y == fast1.y);
        CHECK(other.dx == fast1.dx);
      }
    }
  }
}

// bf16 activations (mixed precision): each path computes in f32 and rounds once, so on bf16 inputs
// its bf16 results are its f32 results rounded, bit for bit: oneDNN's bf16 eltwise the f32 fast
// path's, the loop the f32 loop's (a bf16 loop beside an f32 oneDNN differed in 0.4% of y and 18%
// of dx on the first AVX512_BF16 machine the low-precision tests ran on).
TEST_CASE("fast path gelu, bf16: each path's bf16 results are its f32 results rounded, both forms, 1-3 threads") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  namespace b16 = bf16_check;
  std::mt19937_64 rng(20261130);
  for (ActKind kind : {ActKind::Gelu, ActKind::GeluTanh})
    for (int64_t n : {int64_t(1), int64_t(15), int64_t(70001)}) {
      std::vector<float> xf = inputs(size_t(n), rng);
      ref::Vec x(xf.begin(), xf.end());
      ref::Vec dy(static_cast<size_t>(n));
      std::normal_distribution<double> z(0, 1);
      for (double& g : dy) g = z(rng);
      for (ref::Vec* v : {&x, &dy})
        for (double& e : *v) e = b16::round_to(DType::BF16, e);  // values of bf16: exact in both types
      for (bool fast : {true, false})
        for (int threads : {1, 2, 3}) {
          INFO((kind == ActKind::Gelu ? "exact" : "tanh form") << ", " << n << " elements, " << (fast ? "oneDNN" : "loop")
                                                               << ", " << threads << " thread(s)");
          ContextOptions o;
          o.threads = threads;
          o.fast = fast ? FastPaths::all() : FastPaths::none();
          auto ctx = make_context(Device::cpu(), o);
          auto k = make_kernel<ActivationKernel>(*ctx, ActivationParams{kind});
          const Shape s{n};
          auto pass = [&](DType t, ref::Vec& y, ref::Vec& dx) {
            Tensor tx = b16::make(s, t, x), tdy = b16::make(s, t, dy), ty = b16::nan_of(s, t), tdx = b16::nan_of(s, t);
            k->forward(tx, ty);
            k->backward(tx, ty, tdy, tdx);
            y = b16::values(ty), dx = b16::values(tdx);
          };
          ref::Vec y16, dx16, y32, dx32;
          pass(DType::BF16, y16, dx16);
          pass(DType::F32, y32, dx32);
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i)
            bad += y16[size_t(i)] != b16::round_to(DType::BF16, y32[size_t(i)]) ||
                   dx16[size_t(i)] != b16::round_to(DType::BF16, dx32[size_t(i)]);
          CHECK(bad == 0);
        }
    }
}
