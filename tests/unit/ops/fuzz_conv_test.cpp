// Convolutions (plain and depthwise) on random windows with random fast paths, 1-4 threads, against float64: exact values bit for bit, wide values within their bound.
//
// Where fastpath_conv_test.cpp compares each fast path with its reference path, this checks every
// path — the references included — against the float64 reference: forward, input gradient
// (written, or added in place), weight and bias gradients. It found oneDNN 2.7's wrong 1x1
// backward-weights on strided windows with few input channels (uxlfoundation/oneDNN#6035), which
// OnednnConv now avoids; the last case below keeps that shape.
#include <cmath>
#include <sstream>

#include "../cpu_bf16.h"
#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_onednn_conv.h"
#include "core/ops/depthwise_conv2d.h"
#include "fastpath_fuzz.h"

using namespace trainer;
using namespace trainer::test;
namespace fz = trainer::test::fuzz;
namespace b16 = trainer::test::bf16_check;

namespace {

struct Window {
  int64_t n, h, w, c, f;  // f: output channels (depthwise: c · multiplier)
  int kh, kw, sh, sw, dh, dw, multiplier;  // multiplier 0: a plain convolution
  Padding pad;
  bool bias;
  std::string str() const {
    std::ostringstream o;
    o << (multiplier ? "depthwise x " : "conv x ") << n << "x" << h << "x" << w << "x" << c << " -> " << f << ", "
      << kh << "x" << kw << " stride " << sh << "x" << sw << " dilation " << dh << "x" << dw << " "
      << padding_name(pad) << (bias ? ", bias" : "");
    return o.str();
  }
};

Window random_window(std::mt19937_64& rng) {
  for (;;) {
    Window k{};
    k.multiplier = std::bernoulli_distribution(0.3)(rng) ? int(uniform_int(rng, 1, 3)) : 0;
    k.n = uniform_int(rng, 1, 6);
    k.h = uniform_int(rng, 1, 20), k.w = uniform_int(rng, 1, 20);
    k.c = std::bernoulli_distribution(0.3)(rng) ? uniform_int(rng, 1, 4) : uniform_int(rng, 5, 80);
    k.f = k.multiplier ? k.c * k.multiplier : uniform_int(rng, 1, 70);
    k.kh = int(uniform_int(rng, 1, 5)), k.kw = std::bernoulli_distribution(0.7)(rng) ? k.kh : int(uniform_int(rng, 1, 5));
    k.sh = int(uniform_int(rng, 1, 3)), k.sw = std::bernoulli_distribution(0.7)(rng) ? k.sh : int(uniform_int(rng, 1, 3));
    k.dh = std::bernoulli_distribution(0.8)(rng) ? 1 : int(uniform_int(rng, 2, 3));
    k.dw = std::bernoulli_distribution(0.8)(rng) ? k.dh : int(uniform_int(rng, 1, 3));
    k.pad = std::bernoulli_distribution(0.5)(rng) ? Padding::Same : Padding::Valid;
    k.bias = std::bernoulli_distribution(0.6)(rng);
    const Window1d wh = window_1d(k.h, k.kh, k.sh, k.dh, k.pad), ww = window_1d(k.w, k.kw, k.sw, k.dw, k.pad);
    const int64_t macs = k.n * wh.out * ww.out * k.kh * k.kw * (k.multiplier ? k.multiplier : k.c * k.f);
    if (wh.out > 0 && ww.out > 0 && macs <= 1'500'000) return k;
  }
}

// One convolution's forward and backward on one context; dx added to dx0 where the kernel adds
// (a 1x1 plain convolution with add_dx on), else written alone and summed here as the executor does.
struct Out {
  ref::Vec y, dx, dw, db;
  bool added = false;
};

Out run(OpContext& c, const Window& k, DType t, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
        const ref::Vec& dx0) {
  Out o;
  Tensor y = b16::nan_of(dy.shape(), t), dx = b16::nan_of(x.shape(), t);
  Tensor dw = b16::nan_of(w.shape(), DType::F32), db = b16::nan_of({k.f}, DType::F32);
  Tensor bias = k.bias ? b : Tensor(), dbt = k.bias ? db : Tensor();
  if (k.multiplier) {
    DepthwiseConv2dParams p{k.multiplier, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.pad, k.bias};
    auto conv = make_kernel<DepthwiseConv2dKernel>(c, p);
    conv->forward(x, w, bias, y);
    conv->backward(x, w, dy, dx, dw, dbt);
  } else {
    Conv2dParams p{k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.pad, k.bias};
    auto conv = make_kernel<Conv2dKernel>(c, p);
    conv->forward(x, w, bias, y);
    o.added = conv->adds_dx();
    if (o.added) dx = b16::make(x.shape(), t, dx0);
    conv->backward(x, w, dy, dx, dw, dbt, o.added);
  }
  o.y = b16::values(y), o.dx = b16::values(dx), o.dw = b16::values(dw);
  if (!o.added)
    for (size_t i = 0; i < o.dx.size(); ++i) o.dx[i] = b16::round_to(t, double(float(o.dx[i]) + float(dx0[i])));
  if (k.bias) o.db = b16::values(db);
  return o;
}

}  // namespace

TEST_CASE("convolutions, every path: random windows, fast paths and 1-4 threads against float64, exact values bit for bit", "[fuzz]") {
  fz::Budget budget(300);
  fz::Tally exact_tally{"convolutions against float64 (every path)"};
  std::vector<DType> types = {DType::F32};
  if (cpu_bf16_refusal().empty()) types.push_back(DType::BF16);
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 3);
    const Window k = random_window(rng);
    const DType t = types[size_t(uniform_int(rng, 0, int64_t(types.size()) - 1))];
    const int threads = fz::threads(rng);
    const int choice = int(uniform_int(rng, 0, 2));
    const FastPaths fast = choice == 0 ? FastPaths::none() : choice == 1 ? FastPaths::all()
                                                          : FastPaths::parse("none")
                                                                .with(FastPath::ConvWgrad, uniform_int(rng, 0, 1))
                                                                .with(FastPath::Conv1x1, uniform_int(rng, 0, 1))
                                                                .with(FastPath::AddDx, uniform_int(rng, 0, 1));
    const bool exact = std::bernoulli_distribution(0.5)(rng);
    INFO("case " << i << ": " << k.str() << ", " << dtype_name(t) << ", " << threads << " thread(s), fast paths "
                 << fast.str() << ", " << (exact ? "exact" : "wide") << " values; " << budget.repro(i));
    const Window1d wh = window_1d(k.h, k.kh, k.sh, k.dh, k.pad), ww = window_1d(k.w, k.kw, k.sw, k.dw, k.pad);
    const Shape xs{k.n, k.h, k.w, k.c}, ys{k.n, wh.out, ww.out, k.f};
    const Shape ws = k.multiplier ? Shape{k.kh, k.kw, k.c, k.multiplier} : Shape{k.kh, k.kw, k.c, k.f};
    auto values = [&](const Shape& s, DType vt, int lo, int hi, bool gated) {
      return exact ? fz::exact_values(size_t(s.numel()), rng) : fz::wide_values(size_t(s.numel()), rng, vt, lo, hi, gated);
    };
    // Weights and bias as bf16 holds them when t is bf16 (oneDNN converts the f32 master weights),
    // so that the float64 reference multiplies the same values.
    const ref::Vec xv = values(xs, t, -30, 3, true), wv = values(ws, t, -8, 1, false), bv = values({k.f}, t, -8, 1, false);
    const ref::Vec dyv = values(ys, t, -60, 0, true), dx0 = values(xs, t, -60, 0, true);
    const Tensor x = b16::make(xs, t, xv), w = b16::make(ws, DType::F32, wv), b = b16::make({k.f}, DType::F32, bv);
    const Tensor dy = b16::make(ys, t, dyv);
    const Out o = run(fz::cpu_context_for(threads, t == DType::BF16 ? Precision::BF16 : Precision::FP32, fast), k, t,
                      x, w, b, dy, dx0);

    ref::ConvDims d{k.n, k.h, k.w, k.c, wh.out, ww.out, k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, int(wh.pad_before),
                    int(ww.pad_before)};
    ref::Vec ax = xv, aw = wv, ady = dyv, ab = bv;
    for (ref::Vec* v : {&ax, &aw, &ady, &ab})
      for (double& e : *v) e = std::fabs(e);
    ref::Vec ry, my, rdx, rdw, rdb, mdx, mdw, mdb;
    if (k.multiplier) {
      ry = ref::depthwise_conv2d_forward(d, xv, wv, k.bias ? &bv : nullptr);
      my = ref::depthwise_conv2d_forward(d, ax, aw, k.bias ? &ab : nullptr);
      ref::depthwise_conv2d_backward(d, xv, wv, dyv, rdx, rdw, rdb);
      ref::depthwise_conv2d_backward(d, ax, aw, ady, mdx, mdw, mdb);
    } else {
      ry = ref::conv2d_forward(d, xv, wv, k.bias ? &bv : nullptr);
      my = ref::conv2d_forward(d, ax, aw, k.bias ? &ab : nullptr);
      ref::conv2d_backward(d, xv, wv, dyv, rdx, rdw, rdb);
      ref::conv2d_backward(d, ax, aw, ady, mdx, mdw, mdb);
    }
    for (size_t j = 0; j < rdx.size(); ++j) rdx[j] += dx0[j], mdx[j] += std::fabs(dx0[j]);
    // Bounds: a sum of K terms in any order, γ(K + 2)·Σ|terms| (K: the window's products per output
    // (+ bias); per input for dx (+ dx0); N·OH·OW per weight for dw and db), in bf16 plus the store's
    // rounding of y and dx (2^-8, twice for dx written and then summed) and AVX512-BF16's flush of
    // results below 2^-126 per term. Exact values in f32: no rounding at all, so bound 0.
    const int64_t taps = k.kh * k.kw * (k.multiplier ? 1 : k.c), per_in = taps * k.f, rows = k.n * wh.out * ww.out;
    const bool f32_exact = exact && t == DType::F32;
    const double ub = t == DType::BF16 ? 0x1p-8 : 0.0, flush = t == DType::BF16 ? 0x1p-126 : 0.0;
    auto bound = [&](const ref::Vec& mag, int64_t terms, double store) {
      ref::Vec bd(mag.size());
      for (size_t j = 0; j < mag.size(); ++j)
        bd[j] = f32_exact ? 0.0 : (fz::gamma(terms + 2) + store) * mag[j] * (1 + store) + double(terms) * flush;
      return bd;
    };
    double worst = 0;
    auto check = [&](const char* what, const ref::Vec& got, const ref::Vec& want, const ref::Vec& bd) {
      const fz::Fit f = fz::fit(got, want, bd);
      INFO(what << ": " << f.outside << " of " << want.size() << " elements outside the bound (worst " << f.worst
                << " of it)");
      CHECK(f.outside == 0);
      if (!f32_exact) worst = std::max(worst, f.worst);
    };
    check("y", o.y, ry, bound(my, taps + 1, ub));
    check("dx", o.dx, rdx, bound(mdx, per_in + 1, 2 * ub));
    check("dw", o.dw, rdw, bound(mdw, rows, 0.0));
    if (k.bias) check("db", o.db, rdb, bound(mdb, rows, 0.0));
    if (f32_exact)
      exact_tally.exact(threads, worst);
    else
      exact_tally.wide(threads, worst, "case " + std::to_string(i));
  }
  exact_tally.report(budget);
}

TEST_CASE("conv2d: strided 1x1 weight gradients with few input channels are right on every call, 1-4 threads (oneDNN#6035)") {
  // oneDNN 2.7's jit_1x1 backward-weights got about half of such calls wrong on AVX2 with 2
  // threads (10 x 23 x 8 x 5, 31 filters, stride 1x2), nondeterministically: the same call 20 times.
  Conv2dParams p{31, 1, 1, 1, 2, 1, 1, Padding::Same, true};
  const ConvGeometry g = conv2d_geometry({10, 23, 8, 5}, p);
  std::mt19937_64 rng(7);
  const Shape xs{10, 23, 8, 5}, ys{10, g.oh, g.ow, 31}, ws = conv2d_weight_shape(5, p);
  const ref::Vec xv = fz::exact_values(size_t(xs.numel()), rng), dyv = fz::exact_values(size_t(ys.numel()), rng);
  ref::ConvDims d{10, 23, 8, 5, g.oh, g.ow, 31, 1, 1, 1, 2, 1, 1, g.pt, g.pl};
  ref::Vec zero(size_t(ws.numel()), 0.0), dx, rw, rb;
  ref::conv2d_backward(d, xv, zero, dyv, dx, rw, rb);
  const Tensor x = from_vec(xs, xv), dy = from_vec(ys, dyv), w = from_vec(ws, zero);
  for (int threads = 1; threads <= 4; ++threads) {
    auto conv = make_kernel<Conv2dKernel>(fz::cpu_context_for(threads, Precision::FP32, FastPaths::none()), p);
    int wrong = 0;
    for (int r = 0; r < 20; ++r) {
      Tensor dw = b16::nan_of(ws, DType::F32), db = b16::nan_of({31}, DType::F32), none;
      conv->backward(x, w, dy, none, dw, db);
      wrong += fz::max_diff(to_vec(dw), rw) != 0 || fz::max_diff(to_vec(db), rb) != 0;
    }
    INFO(threads << " thread(s): " << wrong << " of 20 calls wrong");
    CHECK(wrong == 0);
  }
}

namespace {

// A window's tensor shapes (x, y, the weights) and the float64 reference's dimensions.
struct Dims {
  Shape xs, ys, ws;
  ref::ConvDims d;
};
Dims dims_of(const Window& k) {
  const Window1d wh = window_1d(k.h, k.kh, k.sh, k.dh, k.pad), ww = window_1d(k.w, k.kw, k.sw, k.dw, k.pad);
  return {Shape{k.n, k.h, k.w, k.c}, Shape{k.n, wh.out, ww.out, k.f},
          k.multiplier ? Shape{k.kh, k.kw, k.c, k.multiplier} : Shape{k.kh, k.kw, k.c, k.f},
          ref::ConvDims{k.n, k.h, k.w, k.c, wh.out, ww.out, k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw,
                        int(wh.pad_before), int(ww.pad_before)}};
}

// Exact values (k/2^s) through one bf16 convolution (plain, or depthwise when k.multiplier > 0)
// with every fast path off (oneDNN's kernels, as TRAINER_FAST_PATHS=none runs them): dx against
// float64 rounded once to bf16, dw and db against float64 exactly (every partial sum is a float),
// at 1-4 threads.
void check_bf16_backward(const Window& k) {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  INFO(k.str());
  const Dims g = dims_of(k);
  const Shape &xs = g.xs, &ys = g.ys, &ws = g.ws;
  const ref::ConvDims& d = g.d;
  std::mt19937_64 rng(11);
  const ref::Vec xv = fz::exact_values(size_t(xs.numel()), rng), dyv = fz::exact_values(size_t(ys.numel()), rng);
  const ref::Vec wv = fz::exact_values(size_t(ws.numel()), rng);
  ref::Vec rdx, rdw, rdb;
  if (k.multiplier)
    ref::depthwise_conv2d_backward(d, xv, wv, dyv, rdx, rdw, rdb);
  else
    ref::conv2d_backward(d, xv, wv, dyv, rdx, rdw, rdb);
  for (double& v : rdx) v = b16::round_to(DType::BF16, v);
  const Tensor x = b16::make(xs, DType::BF16, xv), dy = b16::make(ys, DType::BF16, dyv), w = from_vec(ws, wv);
  for (int threads = 1; threads <= 4; ++threads) {
    OpContext& c = fz::cpu_context_for(threads, Precision::BF16, FastPaths::none());
    Tensor dx = b16::nan_of(xs, DType::BF16), dw = b16::nan_of(ws, DType::F32), db = b16::nan_of({k.f}, DType::F32);
    Tensor dbt = k.bias ? db : Tensor();
    if (k.multiplier)
      make_kernel<DepthwiseConv2dKernel>(c, DepthwiseConv2dParams{k.multiplier, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw,
                                                                  k.pad, k.bias})
          ->backward(x, w, dy, dx, dw, dbt);
    else
      make_kernel<Conv2dKernel>(c, Conv2dParams{k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.pad, k.bias})
          ->backward(x, w, dy, dx, dw, dbt);
    INFO(threads << " thread(s)");
    CHECK(fz::max_diff(b16::values(dx), rdx) == 0);
    CHECK(fz::max_diff(to_vec(dw), rdw) == 0);
    if (k.bias) CHECK(fz::max_diff(to_vec(db), rdb) == 0);
  }
}

// Exact values through one bf16 convolution's forward (fast paths off): y against float64 rounded
// once to bf16, at 1-4 threads; the primitive oneDNN picks, and (TRAINER_CONV_BF16_FWD=f32) the
// widened f32 one OnednnConv takes where that primitive is AMX's strided one (forward_widened).
void check_bf16_forward(const Window& k) {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  INFO(k.str());
  const Dims g = dims_of(k);
  const Shape &xs = g.xs, &ys = g.ys, &ws = g.ws;
  const ref::ConvDims& d = g.d;
  std::mt19937_64 rng(13);
  const ref::Vec xv = fz::exact_values(size_t(xs.numel()), rng), wv = fz::exact_values(size_t(ws.numel()), rng);
  const ref::Vec bv = fz::exact_values(size_t(k.f), rng);
  ref::Vec ry = k.multiplier ? ref::depthwise_conv2d_forward(d, xv, wv, k.bias ? &bv : nullptr)
                             : ref::conv2d_forward(d, xv, wv, k.bias ? &bv : nullptr);
  for (double& v : ry) v = b16::round_to(DType::BF16, v);
  const Tensor x = b16::make(xs, DType::BF16, xv), w = from_vec(ws, wv), b = from_vec({k.f}, bv);
  for (const bool widened : {false, true}) {
    if (widened) setenv("TRAINER_CONV_BF16_FWD", "f32", 1);
    for (int threads = 1; threads <= 4; ++threads) {
      OpContext& c = fz::cpu_context_for(threads, Precision::BF16, FastPaths::none());
      Tensor y = b16::nan_of(ys, DType::BF16), bias = k.bias ? b : Tensor();
      if (k.multiplier)
        make_kernel<DepthwiseConv2dKernel>(c, DepthwiseConv2dParams{k.multiplier, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw,
                                                                    k.pad, k.bias})
            ->forward(x, w, bias, y);
      else
        make_kernel<Conv2dKernel>(c, Conv2dParams{k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.pad, k.bias})
            ->forward(x, w, bias, y);
      INFO(threads << " thread(s), " << (widened ? "widened to f32" : "oneDNN's choice"));
      CHECK(fz::max_diff(b16::values(y), ry) == 0);
    }
    if (widened) unsetenv("TRAINER_CONV_BF16_FWD");
  }
}

}  // namespace

TEST_CASE("conv2d bf16: 1x1 convolutions with an odd number of filters give the right input gradient (oneDNN 2.6.3's jit_bf16_1x1)") {
  // oneDNN's 1x1 backward-data kernel took the filters in pairs: with 1, 3, 17 or 31 of them nearly
  // every element of dx was wrong at stride 1, a tenth at stride 3 (OnednnConv::make_bwd_data).
  for (int64_t f : {1, 3, 17, 31, 16})
    check_bf16_backward({2, 6, 10, 139, f, 1, 1, 1, 1, 1, 1, 0, Padding::Valid, true});
  check_bf16_backward({4, 18, 15, 15, 39, 1, 1, 3, 3, 1, 1, 0, Padding::Same, false});  // fuzz case 268, seed 1912295804
  check_bf16_backward({4, 9, 20, 9, 43, 1, 1, 1, 2, 1, 1, 0, Padding::Same, true});     // fuzz case 2133
}

TEST_CASE("conv2d bf16: oneDNN's weight gradients, plain (the reference path) and depthwise, are right on one-pixel-wide and dilated windows") {
  // oneDNN 2.6.3's bf16 backward-weights kernels wrote values up to 1e75 and left NaN there
  // (OnednnConv::make_bwd_weights): cases 140, 209 and 160 of fastpath_conv_test's seed 20261128,
  // 57 and 1550 of fuzz_conv_test's seed 1912295804.
  check_bf16_backward({1, 15, 1, 14, 22, 3, 3, 3, 3, 1, 1, 0, Padding::Same, true});
  check_bf16_backward({1, 19, 1, 198, 4, 3, 3, 2, 2, 1, 1, 0, Padding::Same, false});
  check_bf16_backward({8, 55, 57, 121, 3, 3, 1, 1, 1, 3, 3, 0, Padding::Valid, false});
  check_bf16_backward({6, 18, 1, 24, 72, 2, 2, 2, 2, 1, 1, 3, Padding::Same, false});
  check_bf16_backward({5, 19, 1, 3, 3, 5, 5, 3, 3, 1, 1, 1, Padding::Same, true});
}

TEST_CASE("conv2d bf16: windows strided past their height give the right output (oneDNN 2.6's AMX forward, #5494), widened or not") {
  // On an AMX Xeon (the GPU machine, 2026-11-30) oneDNN's brgemm forward (brg:avx512_core_amx)
  // returned wrong outputs where the stride exceeds the window's height: cases 158 and 187 of the
  // fuzz test above, seed 20261128. OnednnConv::forward_widened sends those to the f32 primitive;
  // on CPUs without AMX this checks the widened path (and oneDNN's own) against float64.
  check_bf16_forward({6, 20, 7, 36, 59, 1, 2, 3, 3, 1, 1, 0, Padding::Same, true});   // case 158
  check_bf16_forward({3, 10, 11, 77, 38, 1, 3, 2, 2, 1, 1, 0, Padding::Same, true});  // case 187
  check_bf16_forward({2, 13, 9, 16, 32, 1, 1, 2, 2, 1, 1, 0, Padding::Valid, false});  // a strided 1x1 (downsampling)
  check_bf16_forward({2, 12, 12, 5, 10, 2, 2, 3, 3, 1, 1, 2, Padding::Same, true});    // depthwise, stride 3
  // Which forwards are widened: AMX's primitive with a stride past the window's height or width only.
  cpu::OnednnConvConfig strided{false, dnnl::memory::format_tag::hwio, 1, 2, 3, 3, 1, 1, true};
  cpu::OnednnConvConfig dense{false, dnnl::memory::format_tag::hwio, 3, 3, 2, 2, 1, 1, true};
  CHECK(cpu::OnednnConv::forward_widened("brg:avx512_core_amx", strided));
  CHECK_FALSE(cpu::OnednnConv::forward_widened("brg:avx512_core_amx", dense));
  CHECK_FALSE(cpu::OnednnConv::forward_widened("brg:avx512_core", strided));
  CHECK_FALSE(cpu::OnednnConv::forward_widened("jit:avx512_core_bf16", strided));
}
