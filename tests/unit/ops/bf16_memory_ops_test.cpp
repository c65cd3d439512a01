// Low-precision (bf16, f16) activations and element-wise ops (add, accumulate, convert, concat, split) on every backend against float64.
#include "core/ops/activation.h"
#include "core/ops/elementwise.h"

#include <iterator>

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

constexpr float kLeakySlope = 0.3f;  // leaky_relu's slope in these tests (Keras's layer default)

// The derivative as the kernels take it, from y (see backward_reads_y), in float64. reference.h's
// takes it from x: the same for linear, relu and relu6 (y = x where it is 1), not for sigmoid and
// tanh, whose bf16 y is rounded.
ref::Vec grad_from_y(int kind, const ref::Vec& y, const ref::Vec& dy) {
  ref::Vec dx(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    double v = y[i];
    double d = kind == 1 ? v > 0 : kind == 2 ? (v > 0 && v < 6) : kind == 3 ? v * (1 - v) : kind == 4 ? 1 - v * v
             : kind == 8 ? (v > 0 ? 1 : double(kLeakySlope)) : 1;
    dx[i] = dy[i] * d;
  }
  return dx;
}

}  // namespace

TEST_CASE("low-precision activations match float64 within one rounding, and in place equals out of place", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const DType L = lo.type;
    std::mt19937_64 rng(111);
    for (int kind = 0; activation_names()[kind]; ++kind) {  // every ActKind, in order
      INFO("activation " << activation_name(ActKind(kind)));
      // gelu (5, 6): f32 erf/tanh near -1 lose up to a few units of 2^-24 of 1 in 1 + erf (1 + tanh),
      // times |x|/2 <= 4: < 1e-6 absolute forward, and with the derivative's 1 - t^2 term times
      // up to ~30 (x = 8), < 1e-5 for |dy| <= 1; relative, the f32 formula's few ulp (< 1e-4).
      // silu (7): f32 sigmoid's few ulp times |x| <= 8 forward, its derivative (at most 1.1) from
      // the same: within the same bounds; like gelu, its backward reads x. So do elu, selu,
      // softplus, hard_sigmoid, hard_silu and mish (9-14: f32 exp/expm1/log1p/tanh within a few
      // ulp, outputs and derivatives of magnitude <= 8 and <= 1.8 on [-8, 8]: the same bounds);
      // leaky_relu (8) from y, as relu, its slope·x one f32 rounding.
      const bool gelu = backward_reads_x(ActKind(kind));
      const float alpha = ActKind(kind) == ActKind::LeakyRelu ? kLeakySlope : ActKind(kind) == ActKind::Elu ? 0.7f : 0.0f;
      auto k = make_kernel<ActivationKernel>(lo.ctx(), ActivationParams{ActKind(kind), alpha});
      // linear, relu, relu6: y is x, 0 or 6 and dx is dy or 0, all values of the type: exact.
      const bool exact = kind <= 2;
      for (Shape s : {Shape{1}, Shape{3, 7}, Shape{2, 5, 5, 13}, Shape{64, 16, 16, 32}, Shape{0, 4}}) {
        INFO("shape [" << s.str() << "]");
        ref::Vec x = random_values(s, rng, L, -8.0, 8.0), dy = random_values(s, rng, L);
        Tensor xb = lo.up(make(s, L, x)), yb = lo.up(nan_of(s, L));
        k->forward(xb, yb);
        const Tensor yh = lo.down(yb);
        // sigmoid, tanh: f32 exp, tanh and 1 - s are within a few units of 2^-24 (kF) of these
        // values of magnitude <= 1 (CUDA's expf/tanhf: 2 and 2 ulp, CUDA C guide): 16 kF covers them.
        check_bound("y", yh, ref::activation_forward(kind, x, alpha), exact ? 0 : lo.u() + (gelu ? 1e-4 : 0),
                    exact ? 0 : gelu ? 1e-5 : (1 + lo.u()) * 16 * kF);
        Tensor yf = lo.up(nan_of(s, DType::F32));
        k->forward(lo.up(make(s, DType::F32, x)), yf);
        check_is_rounding_of("y", yh, lo.down(yf));

        Tensor dyb = lo.up(make(s, L, dy)), dxb = lo.up(nan_of(s, L));
        k->backward(xb, yb, dyb, dxb);
        const Tensor dxh = lo.down(dxb);
        // sigmoid dy y (1 - y), tanh dy (1 - y^2) (y^2 of a low-precision y is exact in f32): at most
        // three f32 roundings of the product, < 2^-21 relative (and doubled by the final rounding's (1 + u)).
        if (gelu)  // its derivative from x (backward_reads_x), x exact in the low type
          check_bound("dx", dxh, ref::activation_backward(kind, x, dy, alpha), lo.u() + 1e-4, 1e-5);
        else
          check_bound("dx", dxh, grad_from_y(kind, values(yh), dy), exact ? 0 : lo.u() + 0x1p-20, 0);
        Tensor dxf = lo.up(nan_of(s, DType::F32)), ywide = lo.up(make(s, DType::F32, values(yh)));
        k->backward(lo.up(make(s, DType::F32, x)), ywide, lo.up(make(s, DType::F32, dy)), dxf);
        check_is_rounding_of("dx", dxh, lo.down(dxf));

        // In place, as the graph runs them: y over x, then dx over dy.
        Tensor xi = lo.up(make(s, L, x)), dyi = lo.up(make(s, L, dy));
        k->forward(xi, xi);
        CHECK(same_bits(lo.down(xi), yh));
        k->backward(xb, xi, dyi, dyi);
        CHECK(same_bits(lo.down(dyi), dxh));
      }
      Shape s{2, 3};
      Tensor xb = lo.up(make(s, L, ref::Vec(6, 0.5))), xf = lo.up(from_vec(s, ref::Vec(6, 0.5)));
      Tensor xi = lo.up(Tensor::empty(s, DType::I32));
      CHECK_THROWS_AS(k->forward(xb, xf), std::invalid_argument);
      CHECK_THROWS_AS(k->forward(xf, xb), std::invalid_argument);
      CHECK_THROWS_AS(k->forward(xi, xi), std::invalid_argument);
      CHECK_THROWS_AS(k->backward(xb, xb, xf, xb), std::invalid_argument);  // dy f32
      CHECK_THROWS_AS(k->backward(xb, xb, xb, xf), std::invalid_argument);  // dx f32
    }
  }
}

// --- Element-wise: add, accumulate, convert, concat, split.

TEST_CASE("low-precision add sums in f32 and rounds once, accumulate takes every mix of f32 and the low type", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const DType L = lo.type;
    auto k = make_kernel<ElementwiseKernel>(lo.ctx(), ElementwiseParams{});
    std::mt19937_64 rng(121);
    for (Shape s : {Shape{1}, Shape{3, 5, 7}, Shape{64, 16, 16, 48}}) {
      INFO("shape [" << s.str() << "]");
      std::vector<ref::Vec> v;
      std::vector<Tensor> xb, xf;
      for (int i = 0; i < 4; ++i) {
        v.push_back(random_values(s, rng, L));
        xb.push_back(lo.up(make(s, L, v.back()))), xf.push_back(lo.up(make(s, DType::F32, v.back())));
      }
      for (size_t n = 1; n <= 4; ++n) {
        INFO(n << " inputs");
        std::vector<const Tensor*> inb, inf;
        ref::Vec want(v[0].size(), 0.0), mag(v[0].size(), 0.0);
        for (size_t i = 0; i < n; ++i) {
          inb.push_back(&xb[i]), inf.push_back(&xf[i]);
          for (size_t j = 0; j < want.size(); ++j) want[j] += v[i][j], mag[j] += std::fabs(v[i][j]);
        }
        Tensor yb = lo.up(nan_of(s, L)), yf = lo.up(nan_of(s, DType::F32));
        k->add(inb, yb);
        k->add(inf, yf);
        // n - 1 f32 additions of exact values err by <= (n - 1) kF sum|x|, then one rounding.
        double worst = 0;
        for (double e : mag) worst = std::max(worst, e);
        const Tensor yh = lo.down(yb);
        check_bound("add", yh, want, lo.u(), (1 + lo.u()) * double(n - 1) * kF * worst);
        check_is_rounding_of("add", yh, lo.down(yf));
      }
      Tensor y = lo.up(make(s, L, v[0])), want = lo.up(nan_of(s, L));
      k->add({&xb[0], &xb[1]}, want);
      k->add({&y, &xb[1]}, y);  // the output is the first input
      CHECK(same_bits(lo.down(y), lo.down(want)));

      // accumulate: y += x in float, stored as y's type. f32 y: one f32 rounding; low y: its rounding.
      for (DType ty : {DType::F32, L})
        for (DType tx : {DType::F32, L}) {
          INFO("y " << dtype_name(ty) << " += x " << dtype_name(tx));
          ref::Vec a = random_values(s, rng, ty), b = random_values(s, rng, tx), sum(a.size());
          Tensor acc = lo.up(make(s, ty, a)), exact = Tensor::empty(s);
          for (size_t j = 0; j < a.size(); ++j) sum[j] = a[j] + b[j], exact.f32()[j] = float(a[j]) + float(b[j]);
          k->accumulate(lo.up(make(s, tx, b)), acc);
          const Tensor ah = lo.down(acc);
          check_bound("accumulate", ah, sum, ty == L ? lo.u() + (1 + lo.u()) * kF : kF, 0);
          check_is_rounding_of("accumulate", ah, exact);
        }
    }
    Tensor b23 = lo.up(make({2, 3}, L, ref::Vec(6, 1.0))), f23 = lo.up(from_vec({2, 3}, ref::Vec(6, 1.0)));
    Tensor b32 = lo.up(make({3, 2}, L, ref::Vec(6, 1.0)));
    if (k->adds_mixed()) {
      // Inputs of either type (the CPU): each widened exactly, so on values of the low type the bits
      // of the same sum over inputs of one type, into either output type.
      const Shape s{5, 37};
      std::vector<ref::Vec> v;
      std::vector<Tensor> xb, xf;
      for (int i = 0; i < 3; ++i) {
        v.push_back(random_values(s, rng, L));
        xb.push_back(lo.up(make(s, L, v.back()))), xf.push_back(lo.up(make(s, DType::F32, v.back())));
      }
      Tensor mf = lo.up(nan_of(s, DType::F32)), af = lo.up(nan_of(s, DType::F32));
      Tensor mb = lo.up(nan_of(s, L)), ab = lo.up(nan_of(s, L));
      k->add({&xb[0], &xf[1], &xb[2]}, mf);
      k->add({&xf[0], &xf[1], &xf[2]}, af);
      k->add({&xf[0], &xb[1]}, mb);
      k->add({&xb[0], &xb[1]}, ab);
      CHECK(same_bits(lo.down(mf), lo.down(af)));
      CHECK(same_bits(lo.down(mb), lo.down(ab)));
      Tensor one = lo.up(nan_of(s, DType::F32));  // one input of the other type: widened, not copied as bytes
      k->add({&xb[2]}, one);
      CHECK(same_bits(lo.down(one), lo.down(xf[2])));
    } else {
      CHECK_THROWS_AS(k->add({&b23, &f23}, b23), std::invalid_argument);
      CHECK_THROWS_AS(k->add({&b23, &b23}, f23), std::invalid_argument);
    }
    CHECK_THROWS_AS(k->accumulate(b32, b23), std::invalid_argument);
    CHECK_THROWS_AS(k->scale(b23, 2.0f), std::invalid_argument);  // scale stays f32
    Tensor i23 = lo.up(Tensor::empty({2, 3}, DType::I32));
    CHECK_THROWS_AS(k->accumulate(i23, b23), std::invalid_argument);
  }
}

namespace {

// f32 bit patterns and their rounding to the low type.
struct Bits {
  uint32_t f;
  uint16_t b;
};

std::vector<Bits> rounding_cases(DType t) {
  if (t == DType::BF16)  // 1 + 2^-8 is halfway between 1 and its bf16 successor: ties go to the even one.
    return {
        {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81},
        {0x3f807fff, 0x3f80}, {0xbf808000, 0xbf80}, {0xbf818000, 0xbf82}, {0x80000000, 0x8000},
        {0x3fffffff, 0x4000},  // 2 - 2^-23 rounds up into the next binade
        {0x7f7fffff, 0x7f80},  // the largest float rounds up to infinity
        {0x7f7f7fff, 0x7f7f},  // ... while just below the halfway point stays the largest bf16
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80},  // infinities stay
        {0x00008000, 0x0000}, {0x00018000, 0x0002}, {0x00000001, 0x0000}, {0x00008001, 0x0001},  // subnormals
    };
  // f16: 1 + 2^-11 is halfway between 1 and its successor 1 + 2^-10.
  return {
      {0x3f800000, 0x3c00}, {0x3f801000, 0x3c00}, {0x3f803000, 0x3c02}, {0x3f801001, 0x3c01},
      {0x3f800fff, 0x3c00}, {0xbf801000, 0xbc00}, {0x80000000, 0x8000},
      {0x3fffffff, 0x4000},  // 2 - 2^-23 rounds up into the next binade
      {0x477fe000, 0x7bff},  // 65504, the largest f16
      {0x477fefff, 0x7bff},  // just below 65520 stays 65504
      {0x477ff000, 0x7c00},  // 65520, halfway to 65536: to infinity (the even side)
      {0x7f7fffff, 0x7c00},  // the largest float: infinity
      {0x7f800000, 0x7c00}, {0xff800000, 0xfc00},  // infinities stay
      {0x38800000, 0x0400},  // 2^-14, the smallest normal
      {0x33800000, 0x0001},  // 2^-24, the smallest subnormal
      {0x33000000, 0x0000},  // 2^-25: halfway between 0 and 2^-24, to the even 0
      {0x33c00000, 0x0002},  // 3 * 2^-25: halfway between 2^-24 and 2^-23, to the even 2^-23
      {0x00000001, 0x0000},  // f32 subnormals vanish
  };
}

}  // namespace

TEST_CASE("convert rounds f32 to the low type to nearest even and widens it to f32 exactly", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const DType L = lo.type;
    auto k = make_kernel<ElementwiseKernel>(lo.ctx(), ElementwiseParams{});
    const std::vector<Bits> cases = rounding_cases(L);
    const size_t n = cases.size();
    Tensor f = Tensor::empty({int64_t(n)});
    for (size_t i = 0; i < n; ++i) f.f32()[i] = f32_of(cases[i].f);
    Tensor b = lo.up(nan_of({int64_t(n)}, L));
    k->convert(lo.up(f), b);
    const Tensor bh = lo.down(b);
    for (size_t i = 0; i < n; ++i) {
      INFO(std::hex << "f32 0x" << cases[i].f << " -> 0x" << bh.as<uint16_t>()[i] << ", want 0x" << cases[i].b);
      CHECK(bh.as<uint16_t>()[i] == cases[i].b);
    }
    // NaNs (quiet, signalling with only a low payload bit, negative) stay NaN.
    Tensor nf = Tensor::empty({3}), nb = Tensor::empty({3}, L);
    const uint32_t nans[] = {0x7fc00000, 0x7f800001, 0xffc00001};
    for (int i = 0; i < 3; ++i) nf.f32()[i] = f32_of(nans[i]), nb.as<uint16_t>()[i] = 0;
    Tensor nbd = lo.up(nb);
    k->convert(lo.up(nf), nbd);
    const Tensor nbh = lo.down(nbd);
    for (int i = 0; i < 3; ++i) CHECK(std::isnan(value(nbh, i)));

    // Random values over the type's binades (and beyond) against the double-precision rounding.
    std::mt19937_64 rng(131);
    Shape s{64, 16, 16, 48};
    Tensor rf = Tensor::empty(s);
    std::uniform_real_distribution<double> e(L == DType::BF16 ? -130.0 : -27.0, L == DType::BF16 ? 127.0 : 17.0);
    for (int64_t i = 0; i < rf.numel(); ++i) rf.f32()[i] = float((i % 2 ? -1 : 1) * std::exp2(e(rng)));
    Tensor rb = lo.up(nan_of(s, L));
    k->convert(lo.up(rf), rb);
    ref::Vec want = to_vec(rf);
    for (double& w : want) w = round_to(L, w);
    const Tensor rbh = lo.down(rb);
    int64_t off = 0;
    for (int64_t i = 0; i < rf.numel(); ++i) off += !(value(rbh, i) == want[size_t(i)]);
    CHECK(off == 0);

    // Every bit pattern widens to the f32 of its value, reshaped on the way.
    Tensor all = Tensor::empty({256, 256}, L);
    for (uint32_t i = 0; i < 65536; ++i) all.as<uint16_t>()[i] = uint16_t(i);
    Tensor wide = lo.up(nan_of({65536}, DType::F32)), alld = lo.up(all);
    k->convert(alld, wide);
    const Tensor wh = lo.down(wide);
    int64_t bad = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const double w = value(all, i), got = wh.f32()[i];
      bad += !(w == got || (std::isnan(w) && std::isnan(got)));
    }
    CHECK(bad == 0);
    // Same type: a copy.
    Tensor again = lo.up(nan_of({256, 256}, L)), fcopy = lo.up(nan_of(s, DType::F32)), rfd = lo.up(rf);
    k->convert(alld, again);
    CHECK(same_bits(lo.down(again), all));
    k->convert(rfd, fcopy);
    CHECK(same_bits(lo.down(fcopy), rf));
    CHECK_THROWS_AS(k->convert(alld, rb), std::invalid_argument);  // element counts differ
    Tensor i32 = lo.up(Tensor::empty({256, 256}, DType::I32));
    CHECK_THROWS_AS(k->convert(i32, wide), std::invalid_argument);
  }
}

TEST_CASE("low-precision concat and split along the last axis round-trip bit for bit", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const DType L = lo.type;
    auto k = make_kernel<ElementwiseKernel>(lo.ctx(), ElementwiseParams{});
    std::mt19937_64 rng(141);
    for (std::vector<int64_t> lead : {std::vector<int64_t>{1}, {2, 3, 5}, {64, 15, 15}, {0, 4, 4}}) {
      // The first two (8 and 16 channels at 16-byte aligned offsets of a 48-wide y) take CUDA's
      // 16-byte path, the others the element path.
      std::vector<int64_t> widths = {8, 16, 3, 1, 20};
      std::vector<ref::Vec> v;
      std::vector<Tensor> parts;
      std::vector<const Tensor*> in;
      int64_t total = 0;
      for (int64_t w : widths) {
        std::vector<int64_t> d = lead;
        d.push_back(w);
        v.push_back(random_values(Shape(d), rng, L));
        parts.push_back(lo.up(make(Shape(d), L, v.back())));
        total += w;
      }
      for (auto& p : parts) in.push_back(&p);
      std::vector<int64_t> yd = lead;
      yd.push_back(total);
      Shape ys(yd);
      INFO("y [" << ys.str() << "]");
      ref::Vec want(size_t(ys.numel()));
      for (int64_t r = 0, rows = ys.numel() / total; r < rows; ++r)
        for (int64_t i = 0, off = 0; i < int64_t(parts.size()); off += widths[size_t(i)], ++i)
          for (int64_t j = 0; j < widths[size_t(i)]; ++j)
            want[size_t(r * total + off + j)] = v[size_t(i)][size_t(r * widths[size_t(i)] + j)];
      Tensor y = lo.up(nan_of(ys, L));
      k->concat(in, y);
      CHECK(same_bits(lo.down(y), make(ys, L, want)));

      std::vector<Tensor> back;
      std::vector<Tensor*> outs;
      for (auto& p : parts) back.push_back(lo.up(nan_of(p.shape(), L)));
      back[3] = Tensor::view(nullptr, parts[3].shape(), L, lo.ctx().device());  // skipped, with its width
      for (auto& b : back) outs.push_back(&b);
      k->split(y, outs);
      for (size_t i : {0, 1, 2, 4}) {
        INFO("part " << i);
        CHECK(same_bits(lo.down(back[i]), lo.down(parts[i])));
      }
    }
    Tensor a = lo.up(make({2, 3}, L, ref::Vec(6, 1.0))), f = lo.up(from_vec({2, 2}, ref::Vec(4, 1.0)));
    Tensor y = lo.up(nan_of({2, 5}, L)), yf = lo.up(nan_of({2, 5}, DType::F32));
    CHECK_THROWS_AS(k->concat({&a, &f}, y), std::invalid_argument);  // one input f32
    Tensor b = lo.up(make({2, 2}, L, ref::Vec(4, 1.0)));
    CHECK_THROWS_AS(k->concat({&a, &b}, yf), std::invalid_argument);  // y f32
    CHECK_THROWS_AS(k->split(y, {&a, &f}), std::invalid_argument);    // an output f32
  }
}
