// noise tests: the Box–Muller draw of gaussian_noise.h against its definition and a standard normal's moments, and the noise op (GaussianNoise, GaussianDropout) on every backend: values from the seed, the gradient drawn again, odd and empty sizes, bad parameters.
#include <cmath>

#include "backends.h"
#include "core/ops/math/gaussian_noise.h"
#include "core/ops/noise.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// Element i's standard normal value for `seed`, from the definition (float64 throughout).
double normal_of(uint64_t seed, int64_t i) {
  const Philox4 r = dropout_words(uint64_t(i / 4), seed);
  const int j = int(i % 4);
  const double u1 = (double(r.v[j / 2 * 2] >> 8) + 1.0) / 16777216.0, u2 = double(r.v[j / 2 * 2 + 1] >> 8) / 16777216.0;
  const double rad = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
  return j % 2 ? rad * std::sin(th) : rad * std::cos(th);
}

}  // namespace

TEST_CASE("kernel math: gaussian_noise is Box–Muller of the Philox words, a standard normal value") {
  const int64_t n = 200000;
  double sum = 0, sq = 0, fourth = 0, worst = 0;
  int64_t beyond3 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float z = gaussian_noise(dropout_words(uint64_t(i / 4), 99), int(i % 4));
    const double want = normal_of(99, i);
    worst = std::max(worst, std::fabs(double(z) - want));
    sum += z, sq += double(z) * z, fourth += std::pow(double(z), 4);
    beyond3 += std::fabs(z) > 3.0f;
  }
  CHECK(worst <= 4e-7);  // the double value rounded to float (|z| < 6: half an ulp below 2.4e-7)
  const double mean = sum / n, var = sq / n - mean * mean;
  CHECK(std::fabs(mean) < 5 * std::sqrt(1.0 / n));          // 5 sigma
  CHECK(std::fabs(var - 1.0) < 5 * std::sqrt(2.0 / n));     // var of the sample variance: 2/n
  CHECK(std::fabs(fourth / n - 3.0) < 5 * std::sqrt(96.0 / n));  // kurtosis 3 (var of z^4: 96)
  CHECK(std::fabs(double(beyond3) / n - 0.0027) < 0.0006);  // P(|z| > 3) = 0.27%
  // The smallest u1 ((0 >> 8) + 1) / 2^24 bounds |z| by sqrt(2 ln 2^24) = 5.77: never infinite.
  Philox4 zero{{0u, 0u, 0u, 0u}};
  CHECK(std::isfinite(gaussian_noise(zero, 0)));
  CHECK(gaussian_noise(zero, 0) == Approx(std::sqrt(2.0 * std::log(16777216.0))).epsilon(1e-6));
  CHECK(noise_apply(false, 2.0f, 0.5f, 0.2f) == 2.0f + 0.2f * 0.5f);
  CHECK(noise_apply(true, 2.0f, 0.5f, 0.2f) == 2.0f * (1.0f + 0.2f * 0.5f));
}

TEST_CASE("noise: GaussianNoise and GaussianDropout from the seed's normal values, the gradient drawn again", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(46);
    for (bool mult : {false, true}) {
      const float sd = mult ? float(std::sqrt(0.3 / 0.7)) : 0.25f;
      auto k = make_kernel<NoiseKernel>(be.ctx(), NoiseParams{sd, mult});
      for (Shape s : {Shape{1}, Shape{3, 5}, Shape{2, 7, 3}, Shape{0, 4}, Shape{64, 33, 17}}) {
        INFO((mult ? "GaussianDropout" : "GaussianNoise") << ", x [" << s.str() << "]");
        const Tensor hx = random_tensor(s, rng), hdy = random_tensor(s, rng);
        Tensor y = be.nan(s), dx = be.nan(s);
        k->forward(be.upload(hx), y, DropoutSeed{4321, nullptr});
        k->backward(be.upload(hdy), dx, DropoutSeed{4321, nullptr});
        ref::Vec want_y(size_t(s.numel())), want_dx(size_t(s.numel()));
        for (int64_t i = 0; i < s.numel(); ++i) {
          const double z = normal_of(4321, i), x = hx.f32()[i], g = hdy.f32()[i];
          want_y[size_t(i)] = mult ? x * (1.0 + sd * z) : x + sd * z;
          want_dx[size_t(i)] = mult ? g * (1.0 + sd * z) : g;
        }
        // f32 arithmetic on the float draw: a few ulps of the value.
        be.check("y", y, want_y, 1e-6);
        be.check("dx", dx, want_dx, mult ? 1e-6 : 0.0);
        if (s.numel() > 10000 && !mult) {  // the noise's own moments
          const Tensor hy = be.download(y);
          double m = 0, v = 0;
          for (int64_t i = 0; i < s.numel(); ++i) m += (hy.f32()[i] - hx.f32()[i]) / sd;
          m /= double(s.numel());
          for (int64_t i = 0; i < s.numel(); ++i) v += std::pow((hy.f32()[i] - hx.f32()[i]) / sd - m, 2);
          v /= double(s.numel());
          CHECK(std::fabs(m) < 0.02);
          CHECK(std::fabs(v - 1.0) < 0.03);
        }
      }
      // Another seed, other values; in place.
      const Tensor hx = random_tensor({40}, rng);
      Tensor a = be.upload(hx), b = be.upload(hx);
      k->forward(a, a, DropoutSeed{1, nullptr});
      k->forward(b, b, DropoutSeed{2, nullptr});
      CHECK(be.vec(a) != be.vec(b));
    }
    CHECK_THROWS_WITH(make_kernel<NoiseKernel>(be.ctx(), NoiseParams{0.0f, false}), Catch::Contains("stddev must be positive"));
    CHECK_THROWS_WITH(make_kernel<NoiseKernel>(be.ctx(), NoiseParams{NAN, true}), Catch::Contains("stddev must be positive"));
  }
}
