// Kernel math of the dw_tiled fast path (depthwise_tiled_math.h) on the host: forward and backward data the general kernels' bits, the filter gradient's blocks and warp sums within their bound of float64.
#include "core/ops/math/depthwise_tiled_math.h"

#include <cstring>

#include "core/ops/window.h"
#include "depthwise_tiled_model.h"
#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;
using trainer::depthwise_math::DwShape;

namespace {

namespace dt = depthwise_tiled;

struct TiledCase {
  int64_t n, h, w, c;
  int k, s;
  int pt, pb, pl, pr;  // explicit padding with 'valid' windows; all -1: 'same'
  bool bias;
};

std::string describe(const TiledCase& t) {
  std::ostringstream o;
  o << t.n << "x" << t.h << "x" << t.w << "x" << t.c << ", " << t.k << "x" << t.k << " stride " << t.s;
  if (t.pt < 0) o << ", same";
  else o << ", padding " << t.pt << "/" << t.pb << " x " << t.pl << "/" << t.pr;
  o << (t.bias ? ", bias" : "");
  return o.str();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Values shaped like training's: uniform in [-1, 1), a third of dy exact zeros (a ReLU6 gate or
// pooling), some values scaled by 2^±20.
std::vector<float> draw(size_t n, std::mt19937_64& rng, bool gated) {
  std::vector<float> v = to_floats(random_floats(n, rng));
  for (float& e : v) {
    const int64_t r = uniform_int(rng, 0, 29);
    if (gated && r < 10) e = 0.0f;
    else if (r == 10) e = std::ldexp(e, 20);
    else if (r == 11) e = std::ldexp(e, -20);
  }
  return v;
}

// Every output vector of forward_vec_at / backward_data_vec_at against forward_at /
// backward_data_at per channel: the number of vectors whose bits differ.
template <int K, int S, int V>
int64_t vector_mismatches(const DwShape& s, const std::vector<float>& x, const std::vector<float>& w,
                          const float* b, const std::vector<float>& dy) {
  const dw_tiled::HostLoadVec<V> vx{x.data()}, vdy{dy.data()};
  const HostLoad lx{x.data()}, ldy{dy.data()};
  int64_t bad = 0;
  for (int32_t i = 0; i < int32_t(s.n * s.oh * s.ow * s.c / V); ++i) {
    float got[V];
    dt::forward_vec_at<K, S, V>(s, vx, w.data(), b, i, got);
    for (int j = 0; j < V; ++j) {
      const float want = depthwise_math::forward_at(s, lx, w.data(), b, int64_t(i) * V + j);
      if (std::memcmp(&got[j], &want, sizeof(float)) != 0) ++bad;
    }
  }
  for (int32_t i = 0; i < int32_t(s.n * s.ih * s.iw * s.c / V); ++i) {
    float got[V];
    dt::backward_data_vec_at<K, S, V>(s, vdy, w.data(), i, got);
    for (int j = 0; j < V; ++j) {
      const float want = depthwise_math::backward_data_at(s, ldy, w.data(), int64_t(i) * V + j);
      if (std::memcmp(&got[j], &want, sizeof(float)) != 0) ++bad;
    }
  }
  return bad;
}

template <int V>
int64_t vector_mismatches(const DwShape& s, const std::vector<float>& x, const std::vector<float>& w,
                          const float* b, const std::vector<float>& dy) {
  return dt::with_window(s, [&](auto k, auto st) {
    return vector_mismatches<decltype(k)::value, decltype(st)::value, V>(s, x, w, b, dy);
  });
}

// max |got - want| / (depth·u·magnitude) over the values (NaN: infinite).
double ratio(const std::vector<float>& got, const ref::Vec& want, const ref::Vec& magnitude, double depth) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    const double err = std::fabs(double(got[i]) - want[i]), bound = depth * kU * magnitude[i];
    if (err > 0) worst = std::max(worst, bound > 0 ? err / bound : INFINITY);
  }
  return worst;
}

ref::Vec absolute(const std::vector<float>& v) {
  ref::Vec a;
  for (float e : v) a.push_back(std::fabs(double(e)));
  return a;
}

}  // namespace

// The tiled kernels' windows (3x3, 5x5; stride 1, 2) with 'same', 'valid' and explicit asymmetric
// padding (pad_fold's), batch 1, one channel, channels off the 32-lane groups, rows enough for
// chunks past the warp's 32 lanes and for the 2048-chunk cap:
//  - forward and backward data, vectors of 4 and 8 channels: every value the general functions'
//    bits (a flipped tap order or a lost bias would differ);
//  - the filter gradient's host model: within filter_sum_depth·u·Σ|terms| of float64, and a model
//    reading the wrong rows (top padding off by one) outside its bound where it changes a value.
TEST_CASE("kernel math: dw_tiled forward and backward data give the general kernels' bits, its filter gradient is within its bound of float64") {
  std::mt19937_64 rng(20261201);
  std::vector<TiledCase> cases = {{1, 1, 1, 1, 3, 1, -1, -1, -1, -1, true},    {1, 7, 7, 8, 3, 2, 0, 1, 0, 1, true},
                                  {2, 12, 12, 96, 3, 2, 0, 1, 0, 1, false},    {2, 9, 9, 40, 5, 1, -1, -1, -1, -1, true},
                                  {1, 80, 80, 4, 3, 1, -1, -1, -1, -1, true},  {3, 5, 4, 33, 5, 2, 2, 0, 1, 2, false},
                                  {1, 520, 520, 2, 3, 1, -1, -1, -1, -1, true}};
  while (cases.size() < 90) {
    TiledCase t{uniform_int(rng, 1, 3), uniform_int(rng, 1, 17), uniform_int(rng, 1, 17), 0,
                uniform_int(rng, 0, 1) ? 3 : 5, int(uniform_int(rng, 1, 2)), -1, -1, -1, -1,
                uniform_int(rng, 0, 1) == 1};
    t.c = uniform_int(rng, 0, 1) ? 8 * uniform_int(rng, 1, 6) : uniform_int(rng, 1, 70);
    if (uniform_int(rng, 0, 1)) {
      t.pt = int(uniform_int(rng, 0, 2)), t.pb = int(uniform_int(rng, 0, 2));
      t.pl = int(uniform_int(rng, 0, 2)), t.pr = int(uniform_int(rng, 0, 2));
    }
    cases.push_back(t);
  }
  int64_t vector_cases = 0, filter_cases = 0;
  double worst = 0;
  for (const TiledCase& t : cases) {
    INFO(describe(t));
    const bool same = t.pt < 0;
    const Window1d wh = window_1d(t.h, t.k, t.s, 1, same ? Padding::Same : Padding::Valid, same ? 0 : t.pt,
                                  same ? 0 : t.pb);
    const Window1d ww = window_1d(t.w, t.k, t.s, 1, same ? Padding::Same : Padding::Valid, same ? 0 : t.pl,
                                  same ? 0 : t.pr);
    if (wh.out <= 0 || ww.out <= 0) continue;
    const DwShape s{t.n, t.h, t.w, t.c, wh.out, ww.out, t.c, 1, t.k, t.k, t.s, t.s, 1, 1, wh.pad_before, ww.pad_before};
    REQUIRE(dt::takes_window(s));
    const std::vector<float> x = draw(size_t(t.n * t.h * t.w * t.c), rng, false);
    const std::vector<float> w = draw(size_t(t.k * t.k * t.c), rng, false);
    const std::vector<float> b = draw(size_t(t.c), rng, false);
    const std::vector<float> dy = draw(size_t(t.n * wh.out * ww.out * t.c), rng, true);
    const float* bp = t.bias ? b.data() : nullptr;
    if (t.c % 4 == 0) {
      CHECK(vector_mismatches<4>(s, x, w, bp, dy) == 0);
      ++vector_cases;
    }
    if (t.c % 8 == 0) CHECK(vector_mismatches<8>(s, x, w, bp, dy) == 0);

    const ref::ConvDims d{t.n, t.h, t.w, t.c, wh.out, ww.out, t.c, t.k, t.k, t.s, t.s, 1, 1, wh.pad_before,
                          ww.pad_before};
    ref::Vec rdx, rdw, rdb, mdx, mdw, mdb;
    ref::depthwise_conv2d_backward(d, to_doubles(x), to_doubles(w), to_doubles(dy), rdx, rdw, rdb);
    ref::depthwise_conv2d_backward(d, absolute(x), absolute(w), absolute(dy), mdx, mdw, mdb);
    std::vector<float> dw, db, dw_wrong, db_wrong;
    dw_tiled::filter_model(s, x.data(), dy.data(), t.bias, dw, db);
    DwShape wrong = s;
    wrong.pt += 1;
    dw_tiled::filter_model(wrong, x.data(), dy.data(), t.bias, dw_wrong, db_wrong);
    int64_t chunks = 0, per = 0;
    dt::filter_chunks(s.n * s.oh * s.ow, chunks, per);
    CHECK((chunks - 1) * per < s.n * s.oh * s.ow);
    CHECK(chunks * per >= s.n * s.oh * s.ow);
    CHECK(chunks <= 2048);
    const double depth = double(dt::filter_sum_depth(per, chunks) + 1);
    const double edw = ratio(dw, rdw, mdw, depth), edb = t.bias ? ratio(db, rdb, mdb, depth) : 0.0;
    INFO(chunks << " chunks of " << per << " rows; dw error / bound " << edw << ", db " << edb);
    CHECK(edw <= 1);
    CHECK(edb <= 1);
    worst = std::max({worst, edw, edb});
    if (!same_bits(dw, dw_wrong)) CHECK(ratio(dw_wrong, rdw, mdw, depth) > 1);
    ++filter_cases;
  }
  WARN("dw_tiled kernel math: " << vector_cases << " cases of forward/backward-data vectors, " << filter_cases
                                << " filter gradients, worst " << worst << " of the bound");
  CHECK(vector_cases >= 30);
  CHECK(filter_cases >= 60);
}

// The butterfly's host model is the device's __shfl_xor_sync sum: every lane ends with one value,
// and it is not the lanes' sum in order (so the model is not a relabelled serial sum).
TEST_CASE("kernel math: dw_tiled's butterfly gives every lane the same sum, in its own order") {
  std::mt19937_64 rng(7);
  int64_t differs = 0;
  for (int r = 0; r < 200; ++r) {
    float lanes[dt::kWarp];
    const std::vector<float> v = draw(dt::kWarp, rng, false);
    for (int l = 0; l < dt::kWarp; ++l) lanes[l] = v[size_t(l)];
    float all[dt::kWarp], next[dt::kWarp];
    for (int l = 0; l < dt::kWarp; ++l) all[l] = lanes[l];
    for (int off = dt::kWarp / 2; off > 0; off /= 2) {
      for (int l = 0; l < dt::kWarp; ++l) next[l] = all[l] + all[l ^ off];
      for (int l = 0; l < dt::kWarp; ++l) all[l] = next[l];
    }
    for (int l = 1; l < dt::kWarp; ++l) CHECK(std::memcmp(&all[l], &all[0], sizeof(float)) == 0);
    const float got = dt::butterfly_sum(lanes);
    CHECK(std::memcmp(&got, &all[0], sizeof(float)) == 0);
    float serial = 0.0f;
    for (float e : v) serial += e;
    if (serial != got) ++differs;
  }
  CHECK(differs > 0);
}
