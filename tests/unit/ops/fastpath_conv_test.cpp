// Convolution fast paths against their reference paths on random cases: our weight gradient vs oneDNN's (f32, bf16), 1x1 convolutions as GEMMs and the in-place input-gradient sum.
#include <cmath>
#include <sstream>

#include "../cpu_bf16.h"
#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_conv_wgrad.h"
#include "fastpath_fuzz.h"
#include "skip.h"

using namespace trainer;
using namespace trainer::test;
namespace fz = trainer::test::fuzz;
namespace b16 = trainer::test::bf16_check;

namespace {

struct ConvCase {
  int64_t n, h, w, c, f;
  Conv2dParams p;
  ConvGeometry g;
  std::string str() const {
    std::ostringstream o;
    o << "x " << n << "x" << h << "x" << w << "x" << c << ", " << f << " filters " << p.kh << "x" << p.kw << ", stride "
      << p.sh << "x" << p.sw << ", dilation " << p.dh << "x" << p.dw << ", " << padding_name(p.padding);
    return o.str();
  }
  int64_t macs() const { return g.n * g.oh * g.ow * p.kh * p.kw * c * f; }
};

ConvCase make_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t f, Conv2dParams p) {
  p.filters = f;
  return {n, h, w, c, f, p, conv2d_geometry({n, h, w, c}, p)};
}

int64_t pick(std::mt19937_64& rng, std::initializer_list<std::pair<double, std::pair<int64_t, int64_t>>> ranges) {
  double r = std::uniform_real_distribution<double>(0, 1)(rng);
  for (const auto& [p, range] : ranges) {
    if (r < p) return uniform_int(rng, range.first, range.second);
    r -= p;
  }
  return ranges.begin()->second.first;
}

// A random plain convolution: batch 1 and odd sizes often, one channel, many channels, output
// channels on either side of a vector of 16, every window (kernel 1-5, stride 1-3, dilation 1-3,
// same or valid), images larger than our kernel's chunk now and then; at most max_macs
// multiply-adds per pass (the float64 reference's time).
ConvCase random_conv(std::mt19937_64& rng, int64_t max_macs, bool window_1x1 = false) {
  for (;;) {
    Conv2dParams p;
    const bool big = std::bernoulli_distribution(0.08)(rng);
    const int64_t n = pick(rng, {{0.3, {1, 1}}, {0.5, {2, 5}}, {0.2, {6, 11}}});
    const int64_t h = big ? uniform_int(rng, 30, 70) : pick(rng, {{0.15, {1, 3}}, {0.85, {4, 24}}});
    const int64_t w = big ? uniform_int(rng, 30, 70) : pick(rng, {{0.15, {1, 3}}, {0.85, {4, 24}}});
    const int64_t c = pick(rng, {{0.2, {1, 3}}, {0.45, {4, 64}}, {0.35, {65, 200}}});
    const int64_t f = pick(rng, {{0.2, {1, 8}}, {0.3, {15, 17}}, {0.3, {18, 100}}, {0.2, {31, 33}}});
    if (!window_1x1) {
      p.kh = int(pick(rng, {{0.2, {1, 1}}, {0.5, {3, 3}}, {0.3, {2, 5}}}));
      p.kw = std::bernoulli_distribution(0.8)(rng) ? p.kh : int(uniform_int(rng, 1, 5));
      p.sh = int(pick(rng, {{0.6, {1, 1}}, {0.4, {2, 3}}}));
      p.sw = std::bernoulli_distribution(0.8)(rng) ? p.sh : int(uniform_int(rng, 1, 3));
      p.dh = int(pick(rng, {{0.8, {1, 1}}, {0.2, {2, 3}}}));
      p.dw = std::bernoulli_distribution(0.8)(rng) ? p.dh : int(uniform_int(rng, 1, 3));
    }
    p.padding = std::bernoulli_distribution(0.5)(rng) ? Padding::Same : Padding::Valid;
    p.bias = std::bernoulli_distribution(0.7)(rng);
    const ConvCase k = make_case(n, h, w, c, f, p);
    if (k.g.oh > 0 && k.g.ow > 0 && k.macs() <= max_macs) return k;
  }
}

// MiniGoogLeNet's and MobileNetV2's shapes among the random ones, and the layers of the repro
// ../shared/repro/conv-wgrad-f32 (its stem, expand and project convolutions).
std::vector<ConvCase> named_cases() {
  auto conv = [](int kh, int s, Padding pad) {
    Conv2dParams p;
    p.kh = p.kw = kh, p.sh = p.sw = s, p.padding = pad, p.bias = false;
    return p;
  };
  return {make_case(16, 16, 16, 3, 8, conv(3, 2, Padding::Same)),   // the repro's stem
          make_case(16, 8, 8, 8, 16, conv(1, 1, Padding::Same)),    // block1/expand
          make_case(16, 8, 8, 16, 8, conv(1, 1, Padding::Same)),    // block1/project
          make_case(4, 32, 32, 3, 96, conv(3, 1, Padding::Same)),   // MiniGoogLeNet conv1
          make_case(2, 15, 15, 160, 80, conv(3, 2, Padding::Valid)),  // a downsample module
          make_case(2, 56, 56, 24, 144, conv(1, 1, Padding::Same))};  // MobileNetV2 expand
}

// Host tensors of type t holding v.
Tensor host(const Shape& s, DType t, const ref::Vec& v) { return b16::make(s, t, v); }
ref::Vec f32_values(const Tensor& t) { return b16::values(t); }

// dw and db by oneDNN's kernel (the reference path: every fast path off).
void onednn_wgrad(int threads, DType t, const ConvCase& k, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  OpContext& c = fz::cpu_context_for(threads, t == DType::BF16 ? Precision::BF16 : Precision::FP32, FastPaths::none());
  auto conv = make_kernel<Conv2dKernel>(c, k.p);
  Tensor w = Tensor::empty(conv2d_weight_shape(k.c, k.p)), none;
  std::memset(w.data(), 0, w.bytes());
  Tensor dbt = k.p.bias ? db : Tensor();
  conv->backward(x, w, dy, none, dw, dbt);
}

void fuzz_wgrad(DType t) {
  fz::Budget budget(t == DType::F32 ? 400 : 300);
  fz::Tally tally{std::string("conv_wgrad (our weight gradient vs oneDNN's, ") + dtype_name(t) + ")"};
  const std::vector<ConvCase> named = named_cases();
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 1);
    const bool exact = i < int64_t(named.size()) || std::bernoulli_distribution(0.5)(rng);
    const ConvCase k = i < int64_t(named.size()) ? named[size_t(i)] : random_conv(rng, exact ? 40'000'000 : 2'000'000);
    const int threads = fz::threads(rng);
    INFO("case " << i << ": " << k.str() << ", " << threads << " thread(s), " << (exact ? "exact" : "wide")
                 << " values; " << budget.repro(i));
    const Shape xs{k.n, k.h, k.w, k.c}, ys{k.g.n, k.g.oh, k.g.ow, k.f}, ws = conv2d_weight_shape(k.c, k.p);
    ref::Vec xv = exact ? fz::exact_values(size_t(xs.numel()), rng) : fz::wide_values(size_t(xs.numel()), rng, t, -30, 3);
    ref::Vec dyv = exact ? fz::exact_values(size_t(ys.numel()), rng) : fz::wide_values(size_t(ys.numel()), rng, t);
    const Tensor x = host(xs, t, xv), dy = host(ys, t, dyv);

    OpContext& ours_ctx = fz::cpu_context_for(threads, t == DType::BF16 ? Precision::BF16 : Precision::FP32,
                                              FastPaths::all());
    cpu::ConvWgrad ours(cpu_context(ours_ctx), k.g, {k.p.kh, k.p.kw, k.p.sh, k.p.sw, k.p.dh, k.p.dw}, t);
    Tensor dw = b16::nan_of(ws, DType::F32), db = b16::nan_of({k.f}, DType::F32);
    ours.run(x, dy, dw, &db);
    Tensor dw_again = b16::nan_of(ws, DType::F32);
    ours.run(x, dy, dw_again, nullptr);  // the same bits again: a fixed partition and order
    CHECK(b16::same_bits(dw, dw_again));
    Tensor rdw = b16::nan_of(ws, DType::F32), rdb = b16::nan_of({k.f}, DType::F32);
    onednn_wgrad(threads, t, k, x, dy, rdw, rdb);
    const ref::Vec got = f32_values(dw), want = f32_values(rdw);

    if (exact) {  // every partial sum is a float: both paths give the exact sums
      const double d = std::max(fz::max_diff(got, want), k.p.bias ? fz::max_diff(f32_values(db), f32_values(rdb)) : 0.0);
      tally.exact(threads, d);
      CHECK(d == 0);
      continue;
    }
    // Each path against float64 within the bound of a sum of T = N·OH·OW products (a product of two
    // bf16 values is exact in f32; an f32 FMA rounds once per term), a few levels of partial sums
    // more (chunks, threads), and in bf16 AVX512-BF16's flush of results below 2^-126 per term.
    ref::ConvDims d{k.n, k.h, k.w, k.c, k.g.oh, k.g.ow, k.f, k.p.kh, k.p.kw, k.p.sh, k.p.sw, k.p.dh, k.p.dw, k.g.pt,
                    k.g.pl};
    const int64_t terms = k.g.n * k.g.oh * k.g.ow;
    ref::Vec zero_w(size_t(ws.numel()), 0.0), dx, rw, rb, mw, mb;
    ref::conv2d_backward(d, xv, zero_w, dyv, dx, rw, rb);
    for (double& v : xv) v = std::fabs(v);
    for (double& v : dyv) v = std::fabs(v);
    ref::conv2d_backward(d, xv, zero_w, dyv, dx, mw, mb);
    const double flush = t == DType::BF16 ? double(terms) * 0x1p-126 : 0.0;
    ref::Vec bw(mw.size()), bb(mb.size());
    for (size_t j = 0; j < mw.size(); ++j) bw[j] = fz::gamma(terms + 8) * mw[j] + flush;
    for (size_t j = 0; j < mb.size(); ++j) bb[j] = fz::gamma(terms + 8) * mb[j] + flush;
    const fz::Fit a = fz::fit(got, rw, bw), b = fz::fit(want, rw, bw);
    INFO("dw: ours " << a.outside << " elements outside the bound (worst " << a.worst << " of it), oneDNN's "
                     << b.outside << " (worst " << b.worst << ")");
    CHECK(a.outside == 0);
    CHECK(b.outside == 0);
    double worst = a.worst;
    if (k.p.bias) {
      const fz::Fit c = fz::fit(f32_values(db), rb, bb);
      INFO("db: " << c.outside << " elements outside the bound (worst " << c.worst << ")");
      CHECK(c.outside == 0);
      worst = std::max(worst, c.worst);
    }
    tally.wide(threads, worst, "case " + std::to_string(i));
  }
  tally.report(budget);
}

}  // namespace

TEST_CASE("fast path conv_wgrad, f32: our weight gradient equals oneDNN's on exact values, both within their bound of float64 on wide ones, over random windows, 1-4 threads", "[fuzz]") {
  if (!cpu::ConvWgrad::available(DType::F32))
    TRAINER_SKIP(CpuFeature, "our f32 weight-gradient kernel needs AVX-512, which this CPU lacks (oneDNN's runs here)");
  fuzz_wgrad(DType::F32);
}

TEST_CASE("fast path conv_wgrad, bf16: our weight gradient equals oneDNN's on exact values, both within their bound of float64 on wide ones, over random windows, 1-4 threads", "[fuzz]") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  if (!cpu::ConvWgrad::available(DType::BF16))
    TRAINER_SKIP(CpuFeature, "our bf16 weight-gradient kernel needs AVX512_BF16, which this CPU lacks");
  fuzz_wgrad(DType::BF16);
}

namespace {

// y, dx (the input gradient added to an earlier consumer's dx0), dw and db of one 1x1 convolution.
struct Pass {
  ref::Vec y, dx, dw, db;
};

Pass run_1x1(OpContext& c, const ConvCase& k, DType t, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& dy, const ref::Vec& dx0) {
  auto conv = make_kernel<Conv2dKernel>(c, k.p);
  const Shape xs = x.shape(), ys = dy.shape();
  Tensor y = b16::nan_of(ys, t), dw = b16::nan_of(w.shape(), DType::F32), db = b16::nan_of({k.f}, DType::F32);
  Tensor bias = k.p.bias ? b : Tensor(), dbt = k.p.bias ? db : Tensor();
  conv->forward(x, w, bias, y);
  Pass p;
  p.y = b16::values(y);
  if (conv->adds_dx()) {  // the fast path: the input gradient added into dx0 in place
    Tensor dx = host(xs, t, dx0);
    conv->backward(x, w, dy, dx, dw, dbt, true);
    p.dx = b16::values(dx);
  } else {  // the reference: written alone, then summed as the executor's add does (in f32, rounded to t)
    Tensor alone = b16::nan_of(xs, t);
    conv->backward(x, w, dy, alone, dw, dbt);
    p.dx = b16::values(alone);
    for (size_t i = 0; i < p.dx.size(); ++i) p.dx[i] = b16::round_to(t, double(float(p.dx[i]) + float(dx0[i])));
  }
  p.dw = b16::values(dw);
  if (k.p.bias) p.db = b16::values(db);
  return p;
}

}  // namespace

TEST_CASE("fast paths conv_1x1 and add_dx: 1x1 convolutions as GEMMs and the input gradient added in place equal oneDNN's convolution and a separate sum, over random shapes, 1-4 threads", "[fuzz]") {
  fz::Budget budget(300);
  fz::Tally gemm{"conv_1x1 (f32 1x1 convolutions as GEMMs vs oneDNN's)"}, add{"add_dx (input gradient added in place vs summed)"};
  std::vector<DType> types = {DType::F32};
  if (cpu_bf16_refusal().empty()) types.push_back(DType::BF16);  // add_dx only: the GEMMs take f32
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 2);
    const DType t = types[size_t(uniform_int(rng, 0, int64_t(types.size()) - 1))];
    const bool exact = std::bernoulli_distribution(0.5)(rng);
    const ConvCase k = random_conv(rng, 3'000'000, true);
    const int threads = fz::threads(rng);
    const int which = int(uniform_int(rng, 1, 3));  // 1: conv_1x1, 2: add_dx, 3: both
    const FastPaths fast = FastPaths::none().with(FastPath::Conv1x1, which & 1).with(FastPath::AddDx, which & 2);
    INFO("case " << i << ": " << k.str() << ", " << dtype_name(t) << ", " << threads << " thread(s), fast paths "
                 << fast.str() << ", " << (exact ? "exact" : "wide") << " values; " << budget.repro(i));
    const Shape xs{k.n, k.h, k.w, k.c}, ys{k.n, k.h, k.w, k.f}, ws{1, 1, k.c, k.f};
    auto values = [&](const Shape& s, int lo, int hi, bool gated) {
      return exact ? fz::exact_values(size_t(s.numel()), rng) : fz::wide_values(size_t(s.numel()), rng, t, lo, hi, gated);
    };
    const ref::Vec xv = values(xs, -30, 3, true), wv = values(ws, -8, 1, false), bv = values({k.f}, -8, 1, false);
    const ref::Vec dyv = values(ys, -60, 0, true), dx0 = values(xs, -60, 0, true);
    const Tensor x = host(xs, t, xv), w = host(ws, DType::F32, wv), b = host({k.f}, DType::F32, bv), dy = host(ys, t, dyv);
    const Precision p = t == DType::BF16 ? Precision::BF16 : Precision::FP32;
    const Pass f = run_1x1(fz::cpu_context_for(threads, p, fast), k, t, x, w, b, dy, dx0);
    const Pass s = run_1x1(fz::cpu_context_for(threads, p, FastPaths::none()), k, t, x, w, b, dy, dx0);

    // The float64 values and each element's bound: a sum of K terms in any order (y: C products and
    // the bias; dx: dx0 and F products — sgemm with beta 1 starts from dx0, which then meets every
    // rounding of the running sum), γ(K + 1) times the sum of their magnitudes, and in bf16 the weights' rounding to
    // bf16 inside oneDNN and the store's (2^-8 of the value each, the store twice for the
    // reference's separate sum).
    ref::ConvDims d{k.n, k.h, k.w, k.c, k.h, k.w, k.f, 1, 1, 1, 1, 1, 1, 0, 0};
    ref::Vec absx = xv, absw = wv, absdy = dyv, absb = bv;
    for (ref::Vec* v : {&absx, &absw, &absdy, &absb})
      for (double& e : *v) e = std::fabs(e);
    const ref::Vec ry = ref::conv2d_forward(d, xv, wv, k.p.bias ? &bv : nullptr);
    const ref::Vec my = ref::conv2d_forward(d, absx, absw, k.p.bias ? &absb : nullptr);
    ref::Vec rdx, rdw, rdb, mdx, mdw, mdb;
    ref::conv2d_backward(d, xv, wv, dyv, rdx, rdw, rdb);
    ref::conv2d_backward(d, absx, absw, absdy, mdx, mdw, mdb);
    const double ub = t == DType::BF16 ? 0x1p-8 : 0.0;
    ref::Vec by(ry.size()), bdx(rdx.size());
    for (size_t j = 0; j < ry.size(); ++j) by[j] = (fz::gamma(k.c + 2) + 2 * ub) * my[j] * (1 + ub);
    for (size_t j = 0; j < rdx.size(); ++j) {
      rdx[j] += dx0[j];
      bdx[j] = ((fz::gamma(k.f + 2) + ub) * mdx[j] + fz::gamma(k.f + 2) * std::fabs(dx0[j])) * (1 + 2 * ub) +
               2 * ub * (mdx[j] + std::fabs(dx0[j]));
    }
    const bool f32_exact = exact && t == DType::F32;  // bf16 rounds the stored sums even of exact values
    // Exact f32 values: the same bits; otherwise each side within its bound of float64.
    auto compare = [&](fz::Tally& tally, const char* what, const ref::Vec& fast_v, const ref::Vec& slow_v,
                       const ref::Vec& want, const ref::Vec& bound) {
      if (f32_exact) {
        const double d = fz::max_diff(fast_v, slow_v);
        tally.exact(threads, d);
        CHECK(d == 0);
        return;
      }
      const fz::Fit a = fz::fit(fast_v, want, bound), r = fz::fit(slow_v, want, bound);
      INFO(what << ": fast " << a.outside << " outside the bound (worst " << a.worst << "), reference " << r.outside);
      CHECK(a.outside == 0);
      CHECK(r.outside == 0);
      tally.wide(threads, a.worst, "case " + std::to_string(i));
    };
    if (which & 1) compare(gemm, "y", f.y, s.y, ry, by);
    compare((which & 2) ? add : gemm, "dx", f.dx, s.dx, rdx, bdx);
    // dw and db come from the same kernel on both sides (conv_wgrad is off): the same bits.
    CHECK(fz::max_diff(f.dw, s.dw) == 0);
    CHECK(fz::max_diff(f.db, s.db) == 0);
  }
  gemm.report(budget);
  add.report(budget);
}
