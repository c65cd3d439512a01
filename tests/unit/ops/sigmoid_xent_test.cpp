// sigmoid_xent tests: binary cross-entropy loss, accuracy and gradient against float64 on every backend (with label smoothing too); extreme logits; bad labels.
#include <cmath>

#include "backends.h"
#include "core/ops/sigmoid_xent.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;

namespace {

Tensor labels_of(const std::vector<int>& z) {
  Tensor t = Tensor::empty({int64_t(z.size())}, DType::I32);
  for (size_t i = 0; i < z.size(); ++i) t.i32()[i] = z[i];
  return t;
}

}  // namespace

TEST_CASE("sigmoid_xent loss, accuracy and gradient match float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(91);
    auto k = make_kernel<SigmoidXentKernel>(be.ctx(), {});
    for (int64_t n : {1, 2, 7, 64, 1000, 5000}) {
      for (bool column : {true, false}) {
        INFO("N " << n << (column ? ", logits [N, 1]" : ", logits [N]"));
        const Shape s = column ? Shape{n, 1} : Shape{n};
        Tensor hx = random_tensor(s, rng, -12.0, 12.0);
        std::vector<int> z(static_cast<size_t>(n));
        for (int& v : z) v = int(uniform_int(rng, 0, 1));
        const double scale = 1.0 / double(n);
        Tensor dx = be.nan(s);
        const LossStats got = k->loss(be.upload(hx), be.upload(labels_of(z)), dx, float(scale));
        const ref::Bce want = ref::sigmoid_xent(to_vec(hx), z, scale);
        CHECK(got.count == n);
        CHECK(got.correct == want.correct);
        INFO("loss " << got.loss_sum << ", reference " << want.loss_sum);
        CHECK(std::fabs(got.loss_sum - want.loss_sum) <= 1e-9 * std::max(1.0, want.loss_sum));
        be.check("dlogits", dx, want.dlogits);
      }
    }
  }
}

TEST_CASE("sigmoid_xent with label smoothing matches float64 reference (targets z(1-ls) + ls/2)", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(92);
    for (float ls : {0.1f, 0.4f, 1.0f}) {
      INFO("label_smoothing " << ls);
      auto k = make_kernel<SigmoidXentKernel>(be.ctx(), SigmoidXentParams{ls});
      const int64_t n = 777;
      Tensor hx = random_tensor({n, 1}, rng, -12.0, 12.0);
      std::vector<int> z(static_cast<size_t>(n));
      for (int& v : z) v = int(uniform_int(rng, 0, 1));
      Tensor dx = be.nan({n, 1});
      const LossStats got = k->loss(be.upload(hx), be.upload(labels_of(z)), dx, 0.5f);
      const ref::Bce want = ref::sigmoid_xent(to_vec(hx), z, 0.5, ls), plain = ref::sigmoid_xent(to_vec(hx), z, 0.5);
      CHECK(got.correct == want.correct);
      INFO("loss " << got.loss_sum << ", reference " << want.loss_sum << ", unsmoothed " << plain.loss_sum);
      CHECK(std::fabs(got.loss_sum - want.loss_sum) <= 1e-6 * std::max(1.0, want.loss_sum));
      CHECK(std::fabs(plain.loss_sum - want.loss_sum) > 1e-3 * want.loss_sum);
      be.check("dlogits", dx, want.dlogits);
    }
    CHECK_THROWS_AS(make_kernel<SigmoidXentKernel>(be.ctx(), SigmoidXentParams{-1.0f}), std::invalid_argument);
  }
}

TEST_CASE("sigmoid_xent is finite for extreme logits and deterministic, labels are checked", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<SigmoidXentKernel>(be.ctx(), {});
    const ref::Vec xs = {-1000.0, -90.0, -20.0, 0.0, 0.0, 20.0, 90.0, 1000.0};
    const std::vector<int> z = {1, 0, 1, 0, 1, 0, 1, 0};
    Tensor x = be.upload(from_vec({8, 1}, xs)), labels = be.upload(labels_of(z)), dx = be.nan({8, 1});
    const LossStats got = k->loss(x, labels, dx, 1.0f);
    const ref::Bce want = ref::sigmoid_xent(xs, z, 1.0);
    CHECK(std::isfinite(got.loss_sum));
    CHECK(got.loss_sum == Approx(want.loss_sum).epsilon(1e-12));
    // Hits: -90 (z 0), 0 (z 0: a logit of 0 predicts 0), 90 (z 1).
    CHECK(got.correct == 3);
    CHECK(want.correct == 3);
    be.check("dlogits", dx, want.dlogits);
    // Without a gradient, and twice: the same sum bit for bit.
    Tensor none;
    CHECK(k->loss(x, labels, none, 1.0f).loss_sum == got.loss_sum);
    Tensor bad = be.upload(labels_of({0, 1, 2, 0, 1, 0, 1, 0}));
    CHECK_THROWS_WITH(k->loss(x, bad, none, 1.0f), "sigmoid_xent: label 2 (sample 2) is not 0 or 1");
    CHECK_THROWS_AS(k->loss(x, bad, none, 1.0f), std::out_of_range);
    Tensor short_labels = be.upload(labels_of({0, 1}));
    CHECK_THROWS_AS(k->loss(x, short_labels, none, 1.0f), std::invalid_argument);
    Tensor wide = be.upload(Tensor::empty({4, 2}));
    CHECK_THROWS_AS(k->loss(wide, be.upload(labels_of({0, 1, 0, 1})), none, 1.0f), std::invalid_argument);
    Tensor x0 = be.empty({0, 1}), l0 = be.empty({0}, DType::I32);
    const LossStats empty = k->loss(x0, l0, none, 1.0f);
    CHECK(empty.count == 0);
    CHECK(empty.loss_sum == 0.0);
  }
}
