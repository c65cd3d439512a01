// bf16 activations and element-wise ops (add, accumulate, convert, concat, split) on the CPU against float64.
#include "core/ops/activation.h"
#include "core/ops/elementwise.h"

#include <iterator>

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

// The derivative as the kernels take it, from y (see backward_reads_y), in float64. reference.h's
// takes it from x: the same for linear, relu and relu6 (y = x where it is 1), not for sigmoid and
// tanh, whose bf16 y is rounded.
ref::Vec grad_from_y(int kind, const ref::Vec& y, const ref::Vec& dy) {
  ref::Vec dx(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    double v = y[i];
    double d = kind == 1 ? v > 0 : kind == 2 ? (v > 0 && v < 6) : kind == 3 ? v * (1 - v) : kind == 4 ? 1 - v * v : 1;
    dx[i] = dy[i] * d;
  }
  return dx;
}

}  // namespace

TEST_CASE("bf16 activations match float64 within one rounding, and in place equals out of place") {
  std::mt19937_64 rng(111);
  for (int kind = 0; kind < 5; ++kind) {
    INFO("activation " << activation_name(ActKind(kind)));
    auto k = make_kernel<ActivationKernel>(cpu_ctx(), ActivationParams{ActKind(kind)});
    // linear, relu, relu6: y is x, 0 or 6 and dx is dy or 0, all bf16 values: exact.
    const bool exact = kind <= 2;
    for (Shape s : {Shape{1}, Shape{3, 7}, Shape{2, 5, 5, 13}, Shape{64, 16, 16, 32}, Shape{0, 4}}) {
      INFO("shape [" << s.str() << "]");
      ref::Vec x = random_values(s, rng, DType::BF16, -8.0, 8.0), dy = random_values(s, rng, DType::BF16);
      Tensor xb = make(s, DType::BF16, x), yb = nan_of(s, DType::BF16);
      k->forward(xb, yb);
      // sigmoid, tanh: f32 exp, tanh and 1 - s are within a few units of 2^-24 (kF) of these
      // values of magnitude <= 1: 16 kF covers them.
      check_bound("y", yb, ref::activation_forward(kind, x), exact ? 0 : kU, exact ? 0 : (1 + kU) * 16 * kF);
      Tensor yf = nan_of(s, DType::F32);
      k->forward(make(s, DType::F32, x), yf);
      check_is_rounding_of("y", yb, yf);

      Tensor dyb = make(s, DType::BF16, dy), dxb = nan_of(s, DType::BF16);
      k->backward(xb, yb, dyb, dxb);
      // sigmoid dy y (1 - y), tanh dy (1 - y^2) (y^2 of a bf16 y is exact): at most three f32
      // roundings of the product, < 2^-21 relative (and doubled by the final rounding's (1 + kU)).
      check_bound("dx", dxb, grad_from_y(kind, values(yb), dy), exact ? 0 : kU + 0x1p-20, 0);
      Tensor dxf = nan_of(s, DType::F32), ywide = make(s, DType::F32, values(yb));
      k->backward(make(s, DType::F32, x), ywide, make(s, DType::F32, dy), dxf);
      check_is_rounding_of("dx", dxb, dxf);

      // In place, as the graph runs them: y over x, then dx over dy.
      Tensor xi = make(s, DType::BF16, x), dyi = make(s, DType::BF16, dy);
      k->forward(xi, xi);
      CHECK(same_bits(xi, yb));
      k->backward(xb, xi, dyi, dyi);
      CHECK(same_bits(dyi, dxb));
    }
    Shape s{2, 3};
    Tensor xb = make(s, DType::BF16, ref::Vec(6, 0.5)), xf = from_vec(s, ref::Vec(6, 0.5));
    Tensor xi = Tensor::empty(s, DType::I32);
    CHECK_THROWS_AS(k->forward(xb, xf), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(xf, xb), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(xi, xi), std::invalid_argument);
    CHECK_THROWS_AS(k->backward(xb, xb, xf, xb), std::invalid_argument);  // dy f32
    CHECK_THROWS_AS(k->backward(xb, xb, xb, xf), std::invalid_argument);  // dx f32
  }
}

// --- Element-wise: add, accumulate, convert, concat, split.

TEST_CASE("bf16 add sums in f32 and rounds once; accumulate takes every mix of f32 and bf16") {
  auto k = make_kernel<ElementwiseKernel>(cpu_ctx(), ElementwiseParams{});
  std::mt19937_64 rng(121);
  for (Shape s : {Shape{1}, Shape{3, 5, 7}, Shape{64, 16, 16, 48}}) {
    INFO("shape [" << s.str() << "]");
    std::vector<ref::Vec> v;
    std::vector<Tensor> xb, xf;
    for (int i = 0; i < 4; ++i) {
      v.push_back(random_values(s, rng, DType::BF16));
      xb.push_back(make(s, DType::BF16, v.back())), xf.push_back(make(s, DType::F32, v.back()));
    }
    for (size_t n = 1; n <= 4; ++n) {
      INFO(n << " inputs");
      std::vector<const Tensor*> inb, inf;
      ref::Vec want(v[0].size(), 0.0), mag(v[0].size(), 0.0);
      for (size_t i = 0; i < n; ++i) {
        inb.push_back(&xb[i]), inf.push_back(&xf[i]);
        for (size_t j = 0; j < want.size(); ++j) want[j] += v[i][j], mag[j] += std::fabs(v[i][j]);
      }
      Tensor yb = nan_of(s, DType::BF16), yf = nan_of(s, DType::F32);
      k->add(inb, yb);
      k->add(inf, yf);
      // n - 1 f32 additions of bf16 values err by <= (n - 1) kF sum|x|, then one rounding.
      double worst = 0;
      for (double e : mag) worst = std::max(worst, e);
      check_bound("add", yb, want, kU, (1 + kU) * double(n - 1) * kF * worst);
      check_is_rounding_of("add", yb, yf);
    }
    Tensor y = make(s, DType::BF16, v[0]), want = nan_of(s, DType::BF16);
    k->add({&xb[0], &xb[1]}, want);
    k->add({&y, &xb[1]}, y);  // the output is the first input
    CHECK(same_bits(y, want));

    // accumulate: y += x in float, stored as y's type. f32 y: one f32 rounding; bf16 y: its bf16 rounding.
    for (DType ty : {DType::F32, DType::BF16})
      for (DType tx : {DType::F32, DType::BF16}) {
        INFO("y " << dtype_name(ty) << " += x " << dtype_name(tx));
        ref::Vec a = random_values(s, rng, ty), b = random_values(s, rng, tx), sum(a.size());
        Tensor acc = make(s, ty, a), exact = Tensor::empty(s);
        for (size_t j = 0; j < a.size(); ++j) sum[j] = a[j] + b[j], exact.f32()[j] = float(a[j]) + float(b[j]);
        k->accumulate(make(s, tx, b), acc);
        check_bound("accumulate", acc, sum, ty == DType::BF16 ? kU + (1 + kU) * kF : kF, 0);
        check_is_rounding_of("accumulate", acc, exact);
      }
  }
  Tensor b23 = make({2, 3}, DType::BF16, ref::Vec(6, 1.0)), f23 = from_vec({2, 3}, ref::Vec(6, 1.0));
  Tensor b32 = make({3, 2}, DType::BF16, ref::Vec(6, 1.0));
  CHECK_THROWS_AS(k->add({&b23, &f23}, b23), std::invalid_argument);
  CHECK_THROWS_AS(k->add({&b23, &b23}, f23), std::invalid_argument);
  CHECK_THROWS_AS(k->accumulate(b32, b23), std::invalid_argument);
  CHECK_THROWS_AS(k->scale(b23, 2.0f), std::invalid_argument);  // scale stays f32
  Tensor i23 = Tensor::empty({2, 3}, DType::I32);
  CHECK_THROWS_AS(k->accumulate(i23, b23), std::invalid_argument);
}

TEST_CASE("convert rounds f32 to bf16 to nearest even and widens bf16 to f32 exactly") {
  auto k = make_kernel<ElementwiseKernel>(cpu_ctx(), ElementwiseParams{});
  struct Bits {
    uint32_t f;
    uint16_t b;
  };
  // 1 + 2^-8 is halfway between 1 and its bf16 successor: ties go to the even one, either way.
  const Bits cases[] = {
      {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81},
      {0x3f807fff, 0x3f80}, {0xbf808000, 0xbf80}, {0xbf818000, 0xbf82}, {0x80000000, 0x8000},
      {0x3fffffff, 0x4000},  // 2 - 2^-23 rounds up into the next binade
      {0x7f7fffff, 0x7f80},  // the largest float rounds up to infinity
      {0x7f7f7fff, 0x7f7f},  // ... while just below the halfway point stays the largest bf16
      {0x7f800000, 0x7f80}, {0xff800000, 0xff80},  // infinities stay
      {0x00008000, 0x0000}, {0x00018000, 0x0002}, {0x00000001, 0x0000}, {0x00008001, 0x0001},  // subnormals
  };
  const size_t n = std::size(cases);
  Tensor f = Tensor::empty({int64_t(n)}), b = nan_of({int64_t(n)}, DType::BF16);
  for (size_t i = 0; i < n; ++i) f.f32()[i] = f32_of(cases[i].f);
  k->convert(f, b);
  for (size_t i = 0; i < n; ++i) {
    INFO(std::hex << "f32 0x" << cases[i].f << " -> bf16 0x" << b.as<uint16_t>()[i] << ", want 0x" << cases[i].b);
    CHECK(b.as<uint16_t>()[i] == cases[i].b);
  }
  // NaNs (quiet, signalling with only a low payload bit, negative) stay NaN.
  Tensor nf = Tensor::empty({3}), nb = nan_of({3}, DType::BF16);
  const uint32_t nans[] = {0x7fc00000, 0x7f800001, 0xffc00001};
  for (int i = 0; i < 3; ++i) nf.f32()[i] = f32_of(nans[i]);
  nb.as<uint16_t>()[0] = nb.as<uint16_t>()[1] = nb.as<uint16_t>()[2] = 0;
  k->convert(nf, nb);
  for (int i = 0; i < 3; ++i) CHECK(std::isnan(value(nb, i)));

  // Random values over many binades against the double-precision rounding.
  std::mt19937_64 rng(131);
  Shape s{64, 16, 16, 48};
  Tensor rf = Tensor::empty(s), rb = nan_of(s, DType::BF16);
  std::uniform_real_distribution<double> e(-130.0, 127.0);
  for (int64_t i = 0; i < rf.numel(); ++i) rf.f32()[i] = float((i % 2 ? -1 : 1) * std::exp2(e(rng)));
  k->convert(rf, rb);
  ref::Vec want = to_vec(rf);
  for (double& w : want) w = round_bf16(w);
  check_bound("f32 -> bf16", rb, want, 0, 0);

  // Every bf16 bit pattern widens to the f32 with those upper bits, reshaped on the way.
  Tensor all = Tensor::empty({256, 256}, DType::BF16), wide = nan_of({65536}, DType::F32);
  for (uint32_t i = 0; i < 65536; ++i) all.as<uint16_t>()[i] = uint16_t(i);
  k->convert(all, wide);
  int64_t bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) bad += f32_bits(wide.f32()[i]) != i << 16;
  CHECK(bad == 0);
  // Same type: a copy.
  Tensor again = nan_of({256, 256}, DType::BF16), fcopy = nan_of(s, DType::F32);
  k->convert(all, again);
  CHECK(same_bits(again, all));
  k->convert(rf, fcopy);
  CHECK(same_bits(fcopy, rf));
  CHECK_THROWS_AS(k->convert(all, rb), std::invalid_argument);  // element counts differ
  Tensor i32 = Tensor::empty({256, 256}, DType::I32);
  CHECK_THROWS_AS(k->convert(i32, wide), std::invalid_argument);
}

TEST_CASE("bf16 concat and split along the last axis round-trip bit for bit") {
  auto k = make_kernel<ElementwiseKernel>(cpu_ctx(), ElementwiseParams{});
  std::mt19937_64 rng(141);
  for (std::vector<int64_t> lead : {std::vector<int64_t>{1}, {2, 3, 5}, {64, 15, 15}, {0, 4, 4}}) {
    std::vector<int64_t> widths = {3, 1, 17, 8};
    std::vector<ref::Vec> v;
    std::vector<Tensor> parts;
    std::vector<const Tensor*> in;
    int64_t total = 0;
    for (int64_t w : widths) {
      std::vector<int64_t> d = lead;
      d.push_back(w);
      v.push_back(random_values(Shape(d), rng, DType::BF16));
      parts.push_back(make(Shape(d), DType::BF16, v.back()));
      total += w;
    }
    for (auto& p : parts) in.push_back(&p);
    std::vector<int64_t> yd = lead;
    yd.push_back(total);
    Shape ys(yd);
    INFO("y [" << ys.str() << "]");
    ref::Vec want(size_t(ys.numel()));
    for (int64_t r = 0, rows = ys.numel() / total; r < rows; ++r)
      for (int64_t i = 0, off = 0; i < int64_t(parts.size()); off += widths[i], ++i)
        for (int64_t j = 0; j < widths[i]; ++j) want[size_t(r * total + off + j)] = v[i][size_t(r * widths[i] + j)];
    Tensor y = nan_of(ys, DType::BF16);
    k->concat(in, y);
    CHECK(same_bits(y, make(ys, DType::BF16, want)));

    std::vector<Tensor> back;
    std::vector<Tensor*> outs;
    for (auto& p : parts) back.push_back(nan_of(p.shape(), DType::BF16));
    back[1] = Tensor::view(nullptr, parts[1].shape(), DType::BF16, Device::cpu());  // skipped, with its width
    for (auto& b : back) outs.push_back(&b);
    k->split(y, outs);
    for (size_t i : {0, 2, 3}) {
      INFO("part " << i);
      CHECK(same_bits(back[i], parts[i]));
    }
  }
  Tensor a = make({2, 3}, DType::BF16, ref::Vec(6, 1.0)), f = from_vec({2, 2}, ref::Vec(4, 1.0));
  Tensor y = nan_of({2, 5}, DType::BF16), yf = nan_of({2, 5}, DType::F32);
  CHECK_THROWS_AS(k->concat({&a, &f}, y), std::invalid_argument);  // one input f32
  Tensor b = make({2, 2}, DType::BF16, ref::Vec(4, 1.0));
  CHECK_THROWS_AS(k->concat({&a, &b}, yf), std::invalid_argument);  // y f32
  CHECK_THROWS_AS(k->split(y, {&a, &f}), std::invalid_argument);    // an output f32
}
