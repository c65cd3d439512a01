// upsample tests: nearest-neighbour upsampling copies exactly and its gradient is each block's sum in f32 in row-major order (within the sum's rounding of float64); bilinear against its definition in float64; f32 and low precision, on every backend; shapes from empty to odd.
#include "core/ops/upsample.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

void check_upsample(OpContext& ctx, DType t, std::mt19937_64& rng) {
  struct Case {
    int64_t n, h, w, c;
    int sh, sw;
  };
  for (Case d : {Case{1, 1, 1, 1, 2, 2}, Case{2, 3, 5, 7, 2, 3}, Case{1, 4, 4, 1, 3, 1}, Case{3, 2, 7, 16, 1, 1},
                 Case{2, 5, 3, 33, 4, 2}, Case{0, 3, 3, 4, 2, 2}, Case{1, 8, 8, 64, 2, 2}}) {
    INFO(dtype_name(t) << " x [" << d.n << ", " << d.h << ", " << d.w << ", " << d.c << "], size " << d.sh << "x" << d.sw);
    auto k = make_kernel<UpsampleKernel>(ctx, UpsampleParams{d.sh, d.sw});
    const int64_t H = d.h * d.sh, W = d.w * d.sw;
    const Shape sx{d.n, d.h, d.w, d.c}, sy{d.n, H, W, d.c};
    const ref::Vec x = random_values(sx, rng, t), dy = random_values(sy, rng, t);
    ref::Vec y(size_t(sy.numel())), dx(size_t(sx.numel()));
    double worst = 0;  // the f32 block sum's distance to float64, against its bound
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t c = 0; c < d.c; ++c)
            y[size_t(((n * H + i) * W + j) * d.c + c)] = x[size_t(((n * d.h + i / d.sh) * d.w + j / d.sw) * d.c + c)];
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.h; ++i)
        for (int64_t j = 0; j < d.w; ++j)
          for (int64_t c = 0; c < d.c; ++c) {
            float s = 0.0f;
            double exact = 0, mag = 0;
            for (int a = 0; a < d.sh; ++a)
              for (int b = 0; b < d.sw; ++b) {
                const double v = dy[size_t(((n * H + i * d.sh + a) * W + j * d.sw + b) * d.c + c)];
                s += float(v);
                exact += v;
                mag += std::fabs(v);
              }
            dx[size_t(((n * d.h + i) * d.w + j) * d.c + c)] = round_to(t, double(s));
            const double bound = (d.sh * d.sw) * 0x1p-24 * mag + (t == DType::F32 ? 0.0 : 0x1p-8 * std::fabs(exact) + 1e-30);
            if (bound > 0) worst = std::max(worst, std::fabs(round_to(t, double(s)) - exact) / bound);
          }
    const Tensor tx = to_device(ctx, make(sx, t, x)), tdy = to_device(ctx, make(sy, t, dy));
    Tensor ty = to_device(ctx, nan_of(sy, t)), tdx = to_device(ctx, nan_of(sx, t));
    k->forward(tx, ty);
    CHECK(values(to_host(ctx, ty)) == y);  // copies: exact
    k->backward(tdy, tdx);
    CHECK(values(to_host(ctx, tdx)) == dx);  // the f32 sum in row-major block order, rounded once
    CHECK(worst <= 1.0);                     // which is within the sum's rounding of the float64 sum
  }
  // Shapes that do not fit and aliasing are refused, naming the tensor.
  auto k = make_kernel<UpsampleKernel>(ctx, UpsampleParams{2, 2});
  const Tensor x = to_device(ctx, make({1, 2, 3, 4}, t, ref::Vec(24, 1.0)));
  Tensor bad = to_device(ctx, nan_of({1, 4, 5, 4}, t)), flat = to_device(ctx, nan_of({24}, t));
  CHECK_THROWS_WITH(k->forward(x, bad), Catch::Contains("upsample") && Catch::Contains("y"));
  CHECK_THROWS_WITH(k->forward(flat, bad), Catch::Contains("upsample") && Catch::Contains("x"));
  Tensor dy = to_device(ctx, nan_of({1, 2, 2, 4}, t));
  Tensor over = Tensor::view(dy.data(), Shape{1, 1, 1, 4}, t, ctx.device());  // dx over dy's first values
  CHECK_THROWS_WITH(k->backward(dy, over), Catch::Contains("alias"));
}

// Bilinear in float64 by its definition (TensorFlow's half-pixel resize): output o along an axis of
// n inputs scaled by s reads src = (o + 0.5) / s − 0.5, clamped to [0, n − 1], between floor and
// floor + 1 (clamped) with weight src − floor(src). The gradient: each output's dy times its weights,
// scattered to its four inputs.
struct Lerp {
  int64_t i0, i1;
  double f;
};
Lerp lerp_of(int64_t o, int64_t n, int s) {
  double src = (double(o) + 0.5) / s - 0.5;
  src = std::min(std::max(src, 0.0), double(n - 1));
  const int64_t i0 = int64_t(std::floor(src));
  return {i0, std::min(i0 + 1, n - 1), src - double(i0)};
}

void check_bilinear(OpContext& ctx, DType t, std::mt19937_64& rng) {
  struct Case {
    int64_t n, h, w, c;
    int sh, sw;
  };
  for (Case d : {Case{1, 1, 1, 1, 2, 2}, Case{2, 3, 5, 7, 2, 3}, Case{1, 4, 4, 1, 3, 1}, Case{3, 2, 7, 16, 1, 1},
                 Case{2, 5, 3, 33, 4, 2}, Case{0, 3, 3, 4, 2, 2}, Case{1, 8, 8, 64, 2, 2}, Case{2, 1, 6, 3, 5, 2}}) {
    INFO("bilinear, " << dtype_name(t) << " x [" << d.n << ", " << d.h << ", " << d.w << ", " << d.c << "], size " << d.sh
                      << "x" << d.sw);
    UpsampleParams p{d.sh, d.sw, true};
    auto k = make_kernel<UpsampleKernel>(ctx, p);
    const int64_t H = d.h * d.sh, W = d.w * d.sw;
    const Shape sx{d.n, d.h, d.w, d.c}, sy{d.n, H, W, d.c};
    const ref::Vec x = random_values(sx, rng, t), dy = random_values(sy, rng, t);
    ref::Vec y(size_t(sy.numel())), ymag(y.size()), dx(size_t(sx.numel()), 0.0), dxmag(dx.size(), 0.0);
    auto xi = [&](int64_t n, int64_t i, int64_t j, int64_t c) { return size_t(((n * d.h + i) * d.w + j) * d.c + c); };
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t c = 0; c < d.c; ++c) {
            const Lerp a = lerp_of(i, d.h, d.sh), b = lerp_of(j, d.w, d.sw);
            const size_t o = size_t(((n * H + i) * W + j) * d.c + c);
            const double wt[4] = {(1 - a.f) * (1 - b.f), (1 - a.f) * b.f, a.f * (1 - b.f), a.f * b.f};
            const size_t at[4] = {xi(n, a.i0, b.i0, c), xi(n, a.i0, b.i1, c), xi(n, a.i1, b.i0, c), xi(n, a.i1, b.i1, c)};
            for (int q = 0; q < 4; ++q) {
              y[o] += wt[q] * x[at[q]];
              ymag[o] += std::fabs(x[at[q]]);
              dx[at[q]] += wt[q] * dy[o];
              dxmag[at[q]] += std::fabs(dy[o]);
            }
          }
    // Bounds: the f32 lerps (three roundings of values within Σ|x|) and the taps' f32 weights (off
    // by up to one rounding of src, ≤ max(H, W)·2^-24, times the values they weigh); the gradient's
    // f32 sum of up to (3·sh)·(3·sw) terms; one more rounding of the result in a low type (round to
    // nearest reaches u·|r| for an r just above a power of two: the bf16 cases come within 0.5% of it).
    const double taps = 2.0 * double(std::max(d.h, d.w)) + 8.0, terms = 9.0 * d.sh * d.sw + taps;
    const double u = t == DType::F32 ? 0.0 : (t == DType::BF16 ? 0x1p-8 : 0x1p-11);
    const Tensor tx = to_device(ctx, make(sx, t, x)), tdy = to_device(ctx, make(sy, t, dy));
    Tensor ty = to_device(ctx, nan_of(sy, t)), tdx = to_device(ctx, nan_of(sx, t));
    k->forward(tx, ty);
    k->backward(tdy, tdx);
    const ref::Vec gy = values(to_host(ctx, ty)), gdx = values(to_host(ctx, tdx));
    double worst = 0;
    for (size_t o = 0; o < y.size(); ++o) {
      const double e = taps * 0x1p-24 * ymag[o], b = e + u * (std::fabs(y[o]) + e) + 1e-30;
      worst = std::max(worst, std::fabs(gy[o] - y[o]) / b);
    }
    for (size_t i = 0; i < dx.size(); ++i) {
      const double e = terms * 0x1p-24 * dxmag[i], b = e + u * (std::fabs(dx[i]) + e) + 1e-30;
      worst = std::max(worst, std::fabs(gdx[i] - dx[i]) / b);
    }
    CHECK(worst <= 1.0);
    if (d.sh == 1 && d.sw == 1) CHECK(gy == x);  // a scale of 1 reads each input at its centre: a copy
  }
}

}  // namespace

TEST_CASE("upsample, bilinear: TensorFlow's half-pixel interpolation and its gradient within f32 rounding of float64", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(83);
    check_bilinear(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("upsample, bilinear: low precision within one more rounding", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(84);
    check_bilinear(lo.ctx(), lo.type, rng);
  }
}

TEST_CASE("upsample copies each pixel to its block and sums the block's gradient, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(81);
    check_upsample(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("upsample copies each pixel to its block and sums the block's gradient, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(82);
    check_upsample(lo.ctx(), lo.type, rng);
  }
}
