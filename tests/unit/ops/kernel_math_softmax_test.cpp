// Kernel math: softmax_math.h (row maximum, shifted exponentials, log-sum-exp, losses, gradients, label smoothing, the argmax rule) and sigmoid_xent.h against the float64 references.
#include "core/ops/math/softmax_math.h"

#include <algorithm>
#include <numeric>

#include "core/ops/sigmoid_xent.h"
#include "kernel_math_util.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;
namespace sm = trainer::softmax_math;

namespace {

// One row through the shared functions in the CPU's order (the GPU's differs only in how the
// row's max and sums are combined).
struct Row {
  float mx, lse;
};
Row row_stats(const float* x, int64_t C) {
  float mx = x[0];
  for (int64_t j = 1; j < C; ++j) mx = sm::max_step(mx, x[j]);
  double s = 0;
  for (int64_t j = 0; j < C; ++j) s += sm::lse_term(x[j], mx);
  return {mx, sm::lse_of(s)};
}

int64_t first_argmax(const float* x, int64_t C) {
  int64_t k = 0;
  for (int64_t j = 1; j < C; ++j)
    if (sm::argmax_better(x[j], j, x[k], k)) k = j;
  return k;
}

}  // namespace

// Softmax: a float sum of C exponentials (each within an ulp or two): (C + 4)u of the largest
// probability; backward's float dot over C terms likewise.
TEST_CASE("kernel math: softmax forward and backward match float64") {
  std::mt19937_64 rng(461);
  for (int64_t rows : {1, 33})
    for (int64_t C : {1, 2, 17, 1000}) {
      INFO(rows << " rows of " << C);
      const std::vector<float> x = to_floats(random_floats(size_t(rows * C), rng, -8, 8));
      const std::vector<float> dy = to_floats(random_floats(size_t(rows * C), rng));
      ref::Vec y, dx, wrong;
      std::vector<float> yf(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        const float* a = &x[r * C];
        float mx = a[0], s = 0;
        for (int64_t j = 1; j < C; ++j) mx = sm::max_step(mx, a[j]);
        for (int64_t j = 0; j < C; ++j) s += (yf[r * C + j] = sm::exp_shifted(a[j], mx));
        for (int64_t j = 0; j < C; ++j) yf[r * C + j] *= 1.0f / s;
        float dot = 0;
        for (int64_t j = 0; j < C; ++j) dot += yf[r * C + j] * dy[r * C + j];
        for (int64_t j = 0; j < C; ++j) {
          y.push_back(yf[r * C + j]);
          dx.push_back(sm::softmax_grad(yf[r * C + j], dy[r * C + j], dot));
          wrong.push_back(yf[r * C + j] * dy[r * C + j]);  // the dot left out
        }
      }
      const double tol = double(C + 4) * kU;
      check_within("y", y, ref::softmax_forward(to_doubles(x), rows, C), tol);
      const ref::Vec want = ref::softmax_backward(to_doubles(yf), to_doubles(dy), rows, C);
      if (C > 1) check_tight("dx", dx, want, tol, wrong);
      else check_within("dx", dx, want, tol);  // one class: y = 1, dx = 0
    }
}

// Cross-entropy: lse in double rounded to f32, each loss within 4u of |lse| + |x - max| + 1; the
// gradient's exponent x - max - lse carries those roundings: 8u of (max |x - max| + |lse| + 1).
TEST_CASE("kernel math: cross-entropy loss, gradient and accuracy match float64 (index and probability labels)") {
  std::mt19937_64 rng(462);
  for (int64_t N : {1, 33})
    for (int64_t C : {1, 2, 17, 1000})
      for (bool sparse : {true, false}) {
        INFO(N << " samples, " << C << " classes, " << (sparse ? "index" : "probability") << " labels");
        std::vector<float> x = to_floats(random_floats(size_t(N * C), rng, -8, 8));
        for (float& v : x) v = std::round(v * 2) / 2;  // ties for the argmax rule
        std::vector<float> t(size_t(N * C), 0.0f);
        std::vector<int64_t> lab(static_cast<size_t>(N));
        for (int64_t i = 0; i < N; ++i) {
          lab[i] = uniform_int(rng, 0, C - 1);
          if (sparse) {
            t[i * C + lab[i]] = 1.0f;
          } else {
            const ref::Vec p = random_floats(size_t(C), rng, 0, 1);
            const double s = std::accumulate(p.begin(), p.end(), 0.0);
            for (int64_t j = 0; j < C; ++j) t[i * C + j] = float(p[j] / s);
          }
        }
        const float scale = 0.25f;
        double loss = 0, wrong_loss = 0, bound = 0;
        int64_t correct = 0;
        ref::Vec d, wrong_d;
        for (int64_t i = 0; i < N; ++i) {
          const float* a = &x[i * C];
          const float* tr = &t[i * C];
          const Row s = row_stats(a, C);
          const int64_t pred = first_argmax(a, C);
          double l = 0;
          if (sparse) {
            l = sm::sparse_loss(s.lse, a[lab[i]], s.mx);
          } else {
            for (int64_t j = 0; j < C; ++j) sm::dense_loss_add(l, tr[j], a[j], s.mx, s.lse);
          }
          loss += l;
          wrong_loss += l + (sparse ? double(s.mx) : 0.0) + (sparse ? 0.0 : double(s.lse));  // shift or lse forgotten
          const int64_t want_class = sparse ? lab[i] : first_argmax(tr, C);
          correct += pred == want_class;
          double spread = 0;
          for (int64_t j = 0; j < C; ++j) spread = std::max(spread, double(s.mx - a[j]));
          bound += 4 * kU * (std::fabs(s.lse) + spread + 1);
          for (int64_t j = 0; j < C; ++j) {
            d.push_back(sm::xent_grad(a[j], s.mx, s.lse, tr[j], scale));
            wrong_d.push_back(sm::xent_grad(a[j], s.mx, s.lse, tr[j], 1.0f));  // the scale forgotten
          }
        }
        const ref::Xent want = ref::cross_entropy(to_doubles(x), to_doubles(t), N, C, scale);
        INFO("loss " << loss << " vs " << want.loss_sum << ", bound " << bound);
        CHECK(std::fabs(loss - want.loss_sum) <= bound);
        if (C > 1) CHECK(std::fabs(wrong_loss - want.loss_sum) > bound);
        CHECK(correct == want.correct);
        check_within("dlogits", d, want.dlogits, 8 * kU * (16 + std::log(double(C)) + 1));
        if (C > 1) CHECK(scaled_err(wrong_d, want.dlogits) > 8 * kU * (16 + std::log(double(C)) + 1));
      }
}

// The GPU combines (value, index) pairs in a tree, the CPU scans; the rule gives the same index in
// any combination order: the first NaN's (as torch.argmax), else the first index of the maximum.
TEST_CASE("kernel math: argmax rule gives the first maximum in any combination order") {
  std::mt19937_64 rng(463);
  int64_t bad = 0, bad_scan = 0, bad_last = 0, bad_old = 0, nan_rows = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int64_t C = uniform_int(rng, 1, 70);
    std::vector<float> x = to_floats(random_floats(size_t(C), rng, -2, 2));
    for (float& v : x) v = std::round(v);  // many ties
    if (trial % 7 == 0) x[size_t(uniform_int(rng, 0, C - 1))] = NAN;
    if (trial % 11 == 0) x[size_t(uniform_int(rng, 0, C - 1))] = NAN;
    if (trial % 13 == 0) x[0] = NAN;
    if (trial % 17 == 0) x[size_t(uniform_int(rng, 0, C - 1))] = -INFINITY;
    std::vector<std::pair<float, int64_t>> items;
    for (int64_t j = 0; j < C; ++j) items.push_back({x[size_t(j)], j});
    std::shuffle(items.begin(), items.end(), rng);
    // The GPU's idle threads' sentinel joins at random places.
    for (int e = 0; e < 3; ++e) items.insert(items.begin() + int64_t(uniform_int(rng, 0, int64_t(items.size()))), {-INFINITY, INT64_MAX});
    auto combine = [&](bool (*better)(float, int64_t, float, int64_t)) {
      std::vector<std::pair<float, int64_t>> v = items;
      std::mt19937_64 order{uint64_t(trial)};
      while (v.size() > 1) {  // random pairwise combination
        const size_t a = size_t(uniform_int(order, 0, int64_t(v.size()) - 2));
        auto p = v[a], q = v[a + 1];
        if (better(q.first, q.second, p.first, p.second)) p = q;
        v[a] = p;
        v.erase(v.begin() + int64_t(a) + 1);
      }
      return v[0].second;
    };
    int64_t want = -1;  // written out: the first NaN, else the first maximum
    for (int64_t j = 0; j < C && want < 0; ++j)
      if (std::isnan(x[size_t(j)])) want = j;
    nan_rows += want >= 0;
    if (want < 0) {
      want = 0;
      for (int64_t j = 1; j < C; ++j)
        if (x[size_t(j)] > x[size_t(want)]) want = j;
    }
    bad += combine(&sm::argmax_better) != want;
    bad_scan += first_argmax(x.data(), C) != want;  // the CPU kernel's scan
    // Wrong rules: the last maximum ('>='); the old one ('>', NaNs never winning), whose answer
    // depended on where the NaN sat in the tree.
    bad_last += combine([](float v2, int64_t k2, float v, int64_t k) { return v2 > v || (v2 == v && k2 > k); }) != want;
    bad_old += combine([](float v2, int64_t k2, float v, int64_t k) { return v2 > v || (v2 == v && k2 < k); }) != want;
  }
  CHECK(nan_rows > 50);
  CHECK(bad == 0);
  CHECK(bad_scan == 0);
  CHECK(bad_last > 0);
  CHECK(bad_old > 0);
  CHECK(sm::label_in_range(0, 1));
  CHECK_FALSE(sm::label_in_range(1, 1));
  CHECK_FALSE(sm::label_in_range(-1, 5));
}

// sigmoid_xent.h (already shared by both backends): loss in double, gradient and hit rule.
TEST_CASE("kernel math: sigmoid cross-entropy per sample matches float64") {
  std::mt19937_64 rng(464);
  for (size_t n : {size_t(1), size_t(1001)}) {
    std::vector<float> x = to_floats(random_floats(n, rng, -30, 30));
    x[0] = 0.0f;
    std::vector<int> z(n);
    for (auto& v : z) v = int(uniform_int(rng, 0, 1));
    double loss = 0;
    int64_t hits = 0;
    ref::Vec d, wrong;
    for (size_t i = 0; i < n; ++i) {
      loss += sigmoid_xent::loss(x[i], z[i]);
      hits += sigmoid_xent::hit(x[i], z[i]);
      d.push_back(sigmoid_xent::grad(x[i], z[i], 0.5f));
      wrong.push_back(sigmoid_xent::grad(-x[i], z[i], 0.5f));  // the sign of the logit flipped
    }
    const ref::Bce want = ref::sigmoid_xent(to_doubles(x), z, 0.5);
    CHECK(std::fabs(loss - want.loss_sum) <= 1e-12 * (1 + want.loss_sum));
    CHECK(hits == want.correct);
    if (n > 1) check_tight("dlogits", d, want.dlogits, 4 * kU, wrong);
    else check_within("dlogits", d, want.dlogits, 4 * kU);  // the one logit is 0: its sign does not matter
  }
}

// Label smoothing (softmax_math.h's smooth and smoothed_sparse_loss, sigmoid_xent.h's smooth)
// against float64 cross-entropies of the smoothed targets; the unsmoothed formulas are the wrong ones.
TEST_CASE("kernel math: label-smoothed cross-entropies (index, probability, binary) match float64") {
  std::mt19937_64 rng(465);
  for (float ls : {0.1f, 0.3f, 1.0f})
    for (int64_t C : {2, 17, 1000})
      for (bool sparse : {true, false}) {
        const int64_t N = 9;
        INFO("label_smoothing " << ls << ", " << C << " classes, " << (sparse ? "index" : "probability") << " labels");
        std::vector<float> x = to_floats(random_floats(size_t(N * C), rng, -8, 8)), t(size_t(N * C), 0.0f);
        std::vector<int64_t> lab(static_cast<size_t>(N));
        for (int64_t i = 0; i < N; ++i) {
          lab[i] = uniform_int(rng, 0, C - 1);
          if (sparse) {
            t[i * C + lab[i]] = 1.0f;
          } else {
            const ref::Vec p = random_floats(size_t(C), rng, 0, 1);
            const double s = std::accumulate(p.begin(), p.end(), 0.0);
            for (int64_t j = 0; j < C; ++j) t[i * C + j] = float(p[j] / s);
          }
        }
        double loss = 0, wrong_loss = 0, bound = 0;
        ref::Vec d, wrong_d, smoothed(t.size());
        for (int64_t i = 0; i < N; ++i) {
          const float* a = &x[i * C];
          const float* tr = &t[i * C];
          const Row s = row_stats(a, C);
          double l = 0, l0 = 0, shift = 0;
          if (sparse) {
            for (int64_t j = 0; j < C; ++j) shift += sm::shift_term(a[j], s.mx);
            l0 = sm::sparse_loss(s.lse, a[lab[i]], s.mx);
            l = sm::smoothed_sparse_loss(l0, s.lse, shift, ls, C);
          } else {
            for (int64_t j = 0; j < C; ++j) sm::dense_loss_add(l, sm::smooth(tr[j], ls, C), a[j], s.mx, s.lse);
            for (int64_t j = 0; j < C; ++j) sm::dense_loss_add(l0, tr[j], a[j], s.mx, s.lse);
          }
          loss += l, wrong_loss += l0;
          double spread = 0;
          for (int64_t j = 0; j < C; ++j) spread = std::max(spread, double(s.mx - a[j]));
          bound += 4 * kU * (std::fabs(s.lse) + spread + 1);
          for (int64_t j = 0; j < C; ++j) {
            smoothed[size_t(i * C + j)] = double(tr[j]) * (1 - double(ls)) + double(ls) / double(C);
            d.push_back(sm::xent_grad(a[j], s.mx, s.lse, sm::smooth(tr[j], ls, C), 0.5f));
            wrong_d.push_back(sm::xent_grad(a[j], s.mx, s.lse, tr[j], 0.5f));
          }
        }
        const ref::Xent want = ref::cross_entropy(to_doubles(x), smoothed, N, C, 0.5);
        INFO("loss " << loss << " vs " << want.loss_sum << ", bound " << bound << ", unsmoothed " << wrong_loss);
        CHECK(std::fabs(loss - want.loss_sum) <= bound);
        CHECK(std::fabs(wrong_loss - want.loss_sum) > bound);
        check_tight("dlogits", d, want.dlogits, 8 * kU * (16 + std::log(double(C)) + 1), wrong_d);
      }
  // Binary: target z(1-ls) + ls/2.
  for (float ls : {0.1f, 1.0f}) {
    const size_t n = 501;
    std::vector<float> x = to_floats(random_floats(n, rng, -30, 30));
    std::vector<int> z(n);
    for (auto& v : z) v = int(uniform_int(rng, 0, 1));
    double loss = 0, wrong_loss = 0, bound = 0;
    ref::Vec d, wrong;
    for (size_t i = 0; i < n; ++i) {
      bound += 2 * kU * (std::fabs(x[i]) + 1);  // the target rounded to float, times the logit
      loss += sigmoid_xent::loss(x[i], sigmoid_xent::smooth(z[i], ls));
      wrong_loss += sigmoid_xent::loss(x[i], float(z[i]));
      d.push_back(sigmoid_xent::grad(x[i], sigmoid_xent::smooth(z[i], ls), 0.5f));
      wrong.push_back(sigmoid_xent::grad(x[i], float(z[i]), 0.5f));
    }
    const ref::Bce want = ref::sigmoid_xent(to_doubles(x), z, 0.5, ls);
    INFO("label_smoothing " << ls << ": loss " << loss << " vs " << want.loss_sum);
    CHECK(std::fabs(loss - want.loss_sum) <= bound);
    CHECK(std::fabs(wrong_loss - want.loss_sum) > bound);
    check_tight("dlogits", d, want.dlogits, 4 * kU, wrong);
  }
}
