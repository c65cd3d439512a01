// attn_softmax's AVX-512 rows (cpu_attention_softmax.h): the exponential within 2 ulp of e^x and its special values, a row's probabilities and log-sum-exp against float64, NaN and infinite scores, every tail length, nothing written past the row, and the same bits wherever the row sits.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/cpu/cpu_attention_softmax.h"
#include "skip.h"

using namespace trainer;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Distance in units in the last place between two finite floats of one sign (or zero).
int64_t ulps(float a, float b) {
  const int32_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return ia > ib ? int64_t(ia) - ib : int64_t(ib) - ia;
}

// exp(x - shift) of each of xs by attn_row_exp, in rows of 1-70 values at offsets 0-15 of a buffer
// whose values around the row are a sentinel that must survive.
std::vector<float> row_exp(const std::vector<float>& xs, float shift, std::mt19937& rng) {
  std::vector<float> out;
  std::vector<float> buf;
  for (size_t i = 0; i < xs.size();) {
    const size_t n = std::min<size_t>(xs.size() - i, size_t(std::uniform_int_distribution<int>(1, 70)(rng)));
    const size_t at = size_t(std::uniform_int_distribution<int>(0, 15)(rng));
    buf.assign(at + n + 16, -7.0f);
    std::copy(xs.begin() + long(i), xs.begin() + long(i + n), buf.begin() + long(at));
    cpu::attn_row_exp(buf.data() + at, int64_t(n), shift);
    for (size_t j = 0; j < at; ++j) REQUIRE(buf[j] == -7.0f);
    for (size_t j = at + n; j < buf.size(); ++j) REQUIRE(buf[j] == -7.0f);
    out.insert(out.end(), buf.begin() + long(at), buf.begin() + long(at + n));
    i += n;
  }
  return out;
}

}  // namespace

TEST_CASE("attn_softmax: its exponential is within 2 ulp of e^x from -87.3 to 88.7, libm's denormals below, and the special values") {
  if (!cpu::attn_softmax_available()) TRAINER_SKIP(CpuFeature, "attn_softmax needs AVX-512, which this CPU lacks");
  std::mt19937 rng(5);
  std::vector<float> xs;
  for (int i = 0; i <= 400000; ++i) xs.push_back(-87.3f + float(i) * (176.0f / 400000.0f));
  std::uniform_real_distribution<float> u(-87.3f, 88.7f), small(-1.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) xs.push_back(u(rng));
  for (int i = 0; i < 100000; ++i) xs.push_back(small(rng) * 1e-3f);
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 0.34657f, -0.34657f, 88.0f, 88.7f, -87.3f, 1e-30f, -1e-30f}) xs.push_back(x);
  const std::vector<float> got = row_exp(xs, 0.0f, rng);
  int64_t worst = 0;
  float at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t d = ulps(got[i], float(std::exp(double(xs[i]))));
    if (d > worst) worst = d, at = xs[i];
  }
  INFO("worst " << worst << " ulp at x = " << at);
  CHECK(worst <= 2);
  // The shift is subtracted in f32 first, as the row's scores minus its log-sum-exp.
  const std::vector<float> shifted = row_exp({3.5f, 2.0f, -40.25f}, 2.0f, rng);
  CHECK(ulps(shifted[0], float(std::exp(1.5))) <= 2);
  CHECK(shifted[1] == 1.0f);
  CHECK(ulps(shifted[2], float(std::exp(-42.25))) <= 2);
  // Below -87.3: denormals within 2 of the smallest steps (libm's are correctly rounded), 0 from
  // about -103.97 (e^x below half the smallest denormal) and for -inf.
  std::vector<float> low;
  for (float x = -87.3f; x > -110.0f; x -= 0.01f) low.push_back(x);
  const std::vector<float> lg = row_exp(low, 0.0f, rng);
  for (size_t i = 0; i < low.size(); ++i) {
    const double want = std::exp(double(low[i]));
    CHECK(std::abs(double(lg[i]) - want) <= std::max(4 * 0x1p-24 * want, 2 * 0x1p-149));
  }
  const std::vector<float> sp = row_exp({std::numeric_limits<float>::quiet_NaN(), -kInf, kInf, -1000.0f, 1000.0f, 88.8f,
                                         -104.0f, 89.0f},
                                        0.0f, rng);
  CHECK(std::isnan(sp[0]));
  CHECK(sp[1] == 0.0f);
  CHECK(sp[2] == kInf);
  CHECK(sp[3] == 0.0f);
  CHECK(sp[4] == kInf);
  CHECK(sp[5] == kInf);
  CHECK(sp[6] == 0.0f);
  CHECK(sp[7] == kInf);
}

// p_j = e_j · (1/Σe). e_j = exp(fl(s_j - m)): the difference rounded (u·|s_j - m| of the argument,
// as much relative in e_j; u = 2^-24), then within 2 ulp (4u). Σe within 4u + u·w, w the e-weighted
// mean of |s_j - m|; 1/Σe and the product one rounding each: |p - exact| ≤ (10u + u·(|s_j - m| +
// w))·exact. lse = m + log(Σe): log's error as Σe's relative one (Σe ≥ 1), plus the roundings of
// log and of the sum, u each of their magnitudes.
TEST_CASE("attn_softmax: a row's probabilities and log-sum-exp against float64, every tail length, the same bits wherever it sits") {
  if (!cpu::attn_softmax_available()) TRAINER_SKIP(CpuFeature, "attn_softmax needs AVX-512, which this CPU lacks");
  const double u = 0x1p-24;
  std::mt19937 rng(9);
  double worst_p = 0, worst_lse = 0;
  for (int c = 0; c < 3000; ++c) {
    const int64_t keys = c < 200 ? 1 + c : std::uniform_int_distribution<int64_t>(1, 1100)(rng);
    const float spread = std::vector<float>{0.1f, 3.0f, 30.0f, 200.0f}[size_t(c % 4)];
    std::uniform_real_distribution<float> s(-spread, spread);
    std::vector<float> x(static_cast<size_t>(keys));
    for (float& v : x) v = s(rng) + (c % 5 == 0 ? 1000.0f : 0.0f);  // rows far from 0 too
    double m = -INFINITY;
    for (float v : x) m = std::max(m, double(v));
    double sum = 0, weighted = 0;
    for (float v : x) sum += std::exp(double(v) - m), weighted += std::exp(double(v) - m) * (m - double(v));
    const double lse = m + std::log(sum), w = weighted / sum;
    for (int64_t at : {int64_t(0), int64_t(1 + c % 15)}) {
      std::vector<float> buf(size_t(at + keys + 16), -7.0f);
      std::copy(x.begin(), x.end(), buf.begin() + at);
      const float got_lse = cpu::attn_row_softmax(buf.data() + at, keys);
      INFO("row " << c << ": " << keys << " keys, spread " << spread << ", at offset " << at);
      for (int64_t j = 0; j < at; ++j) REQUIRE(buf[size_t(j)] == -7.0f);
      for (size_t j = size_t(at + keys); j < buf.size(); ++j) REQUIRE(buf[j] == -7.0f);
      const double lse_bound = 4 * u + u * w + u * std::abs(lse) + u * std::log(sum);
      worst_lse = std::max(worst_lse, std::abs(got_lse - lse) / lse_bound);
      CHECK(std::abs(got_lse - lse) <= lse_bound);
      for (int64_t j = 0; j < keys; ++j) {
        const double want = std::exp(double(x[size_t(j)]) - lse), got = buf[size_t(at + j)];
        const double err = std::abs(got - want);
        const double bound = (10 * u + u * (m - double(x[size_t(j)]) + w)) * want + 0x1p-149;
        worst_p = std::max(worst_p, err / bound);
        if (err > bound) FAIL_CHECK("p[" << j << "] = " << got << ", float64 " << want);
      }
      if (at > 0) {  // the same bits at another offset (16-lane tails fall elsewhere)
        std::vector<float> again(x);
        CHECK(std::bit_cast<uint32_t>(cpu::attn_row_softmax(again.data(), keys)) == std::bit_cast<uint32_t>(got_lse));
        CHECK(std::equal(again.begin(), again.end(), buf.begin() + at));
      }
    }
  }
  WARN("attn_softmax rows: worst p error " << worst_p << " of its bound, lse " << worst_lse);
  // One key: p 1 exactly, lse the score.
  float one = 3.25f;
  CHECK(cpu::attn_row_softmax(&one, 1) == 3.25f);
  CHECK(one == 1.0f);
}

TEST_CASE("attn_softmax: a NaN score makes the row NaN, +inf makes it NaN, -inf scores get probability 0") {
  if (!cpu::attn_softmax_available()) TRAINER_SKIP(CpuFeature, "attn_softmax needs AVX-512, which this CPU lacks");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t keys : {3, 17, 40}) {
    std::vector<float> r(size_t(keys), 0.5f);
    r[size_t(keys / 2)] = nan;
    CHECK(std::isnan(cpu::attn_row_softmax(r.data(), keys)));
    for (float p : r) CHECK(std::isnan(p));
    std::vector<float> i(size_t(keys), 0.5f);
    i[1] = kInf;
    CHECK(std::isnan(cpu::attn_row_softmax(i.data(), keys)));
    for (float p : i) CHECK(std::isnan(p));
    std::vector<float> n(size_t(keys), -kInf);
    n[size_t(keys - 1)] = 2.0f;
    n[0] = 2.0f;
    const float lse = cpu::attn_row_softmax(n.data(), keys);
    CHECK(lse == Approx(2.0 + std::log(2.0)));
    CHECK(n[0] == 0.5f);
    CHECK(n[size_t(keys - 1)] == 0.5f);
    for (int64_t j = 1; j + 1 < keys; ++j) CHECK(n[size_t(j)] == 0.0f);
  }
}

TEST_CASE("attn_softmax: a block of rows (causal or not, 1-40 rows) gives each row's bits as the row alone") {
  if (!cpu::attn_softmax_available()) TRAINER_SKIP(CpuFeature, "attn_softmax needs AVX-512, which this CPU lacks");
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> s(-20.0f, 20.0f);
  for (int c = 0; c < 200; ++c) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 40)(rng), cap = std::uniform_int_distribution<int64_t>(1, 90)(rng);
    const bool causal = c % 2 == 0;
    const cpu::RowKeys keys{causal ? std::uniform_int_distribution<int64_t>(1, cap)(rng) : cap, causal ? 1 : 0, cap};
    const int64_t ld = cap + c % 5;
    std::vector<float> block(size_t(n * ld));
    for (float& v : block) v = s(rng);
    if (c % 7 == 3) block[size_t(ld / 2)] = std::numeric_limits<float>::quiet_NaN();  // a NaN row among others
    std::vector<float> alone(block), lse(static_cast<size_t>(n)), lse_alone(static_cast<size_t>(n));
    cpu::attn_rows_softmax(block.data(), ld, n, keys, lse.data());
    for (int64_t r = 0; r < n; ++r) lse_alone[size_t(r)] = cpu::attn_row_softmax(alone.data() + r * ld, keys.of(r));
    INFO("case " << c << ": " << n << " rows, keys from " << keys.first << (causal ? " by 1" : "") << " to " << cap);
    CHECK(std::memcmp(block.data(), alone.data(), block.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(lse.data(), lse_alone.data(), lse.size() * sizeof(float)) == 0);
  }
}
