// cpu::exp_poly, the CPU attention's vectorised exponential: within 2 ulp of e^x over its range, the special values, and the same bits in a vectorised loop as called one by one.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/cpu/cpu_exp.h"

using namespace trainer;

namespace {

// Distance in units in the last place between two finite floats of one sign (or zero).
int64_t ulps(float a, float b) {
  const int32_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return ia > ib ? int64_t(ia) - ib : int64_t(ib) - ia;
}

float correctly_rounded(float x) { return float(std::exp(double(x))); }

}  // namespace

TEST_CASE("cpu exp_poly: within 2 ulp of e^x from -87.3 to 88.7, libm's expf within 1") {
  std::vector<float> xs;
  for (int i = 0; i <= 2000000; ++i) xs.push_back(-87.3f + float(i) * (176.0f / 2000000.0f));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-87.3f, 88.7f), small(-1.0f, 1.0f);
  for (int i = 0; i < 500000; ++i) xs.push_back(u(rng));
  for (int i = 0; i < 500000; ++i) xs.push_back(small(rng) * 1e-3f);  // near 0: r tiny, the polynomial's first terms
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.34657f, 0.34657f, 88.0f, 88.37f, 88.7f, -87.0f, -87.3f,
                  1e-30f, -1e-30f, 88.722f})
    if (x <= 88.7f) xs.push_back(x);
  int64_t worst = 0, libm_worst = 0;
  float at = 0;
  for (float x : xs) {
    const float want = correctly_rounded(x);
    const int64_t d = ulps(cpu::exp_poly(x), want);
    if (d > worst) worst = d, at = x;
    libm_worst = std::max(libm_worst, ulps(std::exp(x), want));
  }
  INFO("worst " << worst << " ulp at x = " << at << " (libm's expf: " << libm_worst << ")");
  CHECK(worst <= 2);
  CHECK(libm_worst <= 1);
  CHECK(cpu::exp_poly(0.0f) == 1.0f);
}

TEST_CASE("cpu exp_poly: the special values (NaN, infinities, beyond the range)") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(cpu::exp_poly(std::numeric_limits<float>::quiet_NaN())));
  CHECK(cpu::exp_poly(-inf) == 0.0f);
  CHECK(cpu::exp_poly(inf) == inf);
  CHECK(cpu::exp_poly(-1000.0f) == 0.0f);
  CHECK(cpu::exp_poly(-87.31f) == 0.0f);  // below the range: 0 (libm: a denormal)
  CHECK(cpu::exp_poly(1000.0f) == inf);
  CHECK(cpu::exp_poly(88.8f) == inf);
  CHECK(std::isfinite(cpu::exp_poly(88.7f)));
  CHECK(cpu::exp_poly(88.7f) > 3.0e38f);
}

TEST_CASE("cpu exp_poly: a vectorised loop gives the bits of calls one by one") {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  std::vector<float> x(4099), vec(x.size()), one(x.size());
  for (float& v : x) v = u(rng);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  const float* xp = x.data();
  float* vp = vec.data();
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) vp[i] = cpu::exp_poly(xp[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    volatile float xi = x[i];  // one call at a time, not vectorised
    one[i] = cpu::exp_poly(xi);
  }
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&vec[i], &one[i], sizeof(float)) != 0;
  CHECK(differ == 0);
}
