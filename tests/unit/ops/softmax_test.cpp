// softmax tests: forward/backward and cross-entropy (index and one-hot/probability labels) against float64 references.
#include "core/ops/softmax.h"

#include "test_util.h"

using namespace trainer;
using namespace trainer::test;

TEST_CASE("softmax forward and backward match float64 reference") {
  std::mt19937_64 rng(51);
  auto k = make_kernel<SoftmaxKernel>(cpu_ctx(), SoftmaxParams{});
  for (Shape s : {Shape{1, 1}, Shape{3, 10}, Shape{64, 1000}, Shape{2, 3, 7}, Shape{0, 5}}) {
    INFO("shape [" << s.str() << "]");
    int64_t C = s.back(), rows = s.numel() / C;
    Tensor x = random_tensor(s, rng, -20.0, 20.0), y = cpu_ctx().empty(s);
    poison(y);
    k->forward(x, y);
    ref::Vec ry = ref::softmax_forward(to_vec(x), rows, C);
    check_close("y", y, ry);
    Tensor dy = random_tensor(s, rng), dx = cpu_ctx().empty(s);
    poison(dx);
    k->backward(y, dy, dx);
    check_close("dx", dx, ref::softmax_backward(ry, to_vec(dy), rows, C));
  }
  Tensor big = from_vec({1, 3}, {1000.0, 1000.0, -1000.0}), y = cpu_ctx().empty({1, 3});
  k->forward(big, y);  // no overflow
  check_close("y of large logits", y, {0.5, 0.5, 0.0});
}

TEST_CASE("softmax cross_entropy with index labels matches float64 reference") {
  std::mt19937_64 rng(52);
  auto k = make_kernel<SoftmaxKernel>(cpu_ctx(), SoftmaxParams{});
  for (auto [N, C] : {std::pair<int64_t, int64_t>{1, 1}, {7, 10}, {64, 10}, {5, 1000}, {300, 3}}) {
    INFO(N << " samples, " << C << " classes");
    Tensor logits = random_tensor({N, C}, rng, -6.0, 6.0);
    Tensor labels = cpu_ctx().empty({N}, DType::I32);
    ref::Vec onehot(size_t(N * C), 0.0);
    for (int64_t i = 0; i < N; ++i) {
      labels.i32()[i] = int32_t(uniform_int(rng, 0, C - 1));
      onehot[size_t(i * C + labels.i32()[i])] = 1.0;
    }
    if (N > 2) {  // make sure some predictions are right
      int64_t best = 0;
      for (int64_t j = 1; j < C; ++j)
        if (logits.f32()[j] > logits.f32()[best]) best = j;
      labels.i32()[0] = int32_t(best);
      std::fill(onehot.begin(), onehot.begin() + C, 0.0);
      onehot[size_t(best)] = 1.0;
    }
    float scale = 1.0f / float(N);
    ref::Xent want = ref::cross_entropy(to_vec(logits), onehot, N, C, scale);
    Tensor dl = cpu_ctx().empty({N, C});
    poison(dl);
    LossStats got = k->cross_entropy(logits, labels, dl, scale);
    CHECK(got.count == N);
    CHECK(got.correct == want.correct);
    check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want.loss_sum});
    check_close("dlogits", dl, want.dlogits);
    Tensor none;  // evaluation: no gradient
    LossStats eval = k->cross_entropy(logits, labels, none, scale);
    CHECK(eval.loss_sum == got.loss_sum);
    CHECK(eval.correct == got.correct);
  }
}

TEST_CASE("softmax cross_entropy with one-hot and probability labels matches float64 reference") {
  std::mt19937_64 rng(53);
  auto k = make_kernel<SoftmaxKernel>(cpu_ctx(), SoftmaxParams{});
  int64_t N = 33, C = 12;
  Tensor logits = random_tensor({N, C}, rng, -5.0, 5.0);
  // One-hot rows
  Tensor onehot = cpu_ctx().zeros({N, C});
  for (int64_t i = 0; i < N; ++i) onehot.f32()[i * C + uniform_int(rng, 0, C - 1)] = 1.0f;
  // Label-smoothed probability rows (argmax is still the hot class)
  Tensor soft = cpu_ctx().empty({N, C});
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) soft.f32()[i * C + j] = onehot.f32()[i * C + j] * 0.9f + 0.1f / float(C);
  for (Tensor* labels : {&onehot, &soft}) {
    ref::Xent want = ref::cross_entropy(to_vec(logits), to_vec(*labels), N, C, 0.25);
    Tensor dl = cpu_ctx().empty({N, C});
    poison(dl);
    LossStats got = k->cross_entropy(logits, *labels, dl, 0.25f);
    CHECK(got.count == N);
    CHECK(got.correct == want.correct);
    check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want.loss_sum});
    check_close("dlogits", dl, want.dlogits);
  }
}

TEST_CASE("softmax cross_entropy rejects out-of-range labels and mismatched shapes") {
  std::mt19937_64 rng(54);
  auto k = make_kernel<SoftmaxKernel>(cpu_ctx(), SoftmaxParams{});
  Tensor logits = random_tensor({3, 4}, rng), dl = cpu_ctx().empty({3, 4});
  Tensor labels = cpu_ctx().empty({3}, DType::I32);
  labels.i32()[0] = 1, labels.i32()[1] = 4, labels.i32()[2] = 0;
  try {
    k->cross_entropy(logits, labels, dl, 1.0f);
    FAIL("no exception for label 4 of 4 classes");
  } catch (const std::out_of_range& e) {
    CHECK_THAT(e.what(), Catch::Contains("label 4"));
  }
  labels.i32()[1] = -1;
  CHECK_THROWS_AS(k->cross_entropy(logits, labels, dl, 1.0f), std::out_of_range);
  Tensor short_labels = cpu_ctx().empty({2}, DType::I32);
  short_labels.i32()[0] = short_labels.i32()[1] = 0;
  CHECK_THROWS_AS(k->cross_entropy(logits, short_labels, dl, 1.0f), std::invalid_argument);
  Tensor bad_onehot = cpu_ctx().zeros({3, 5});
  CHECK_THROWS_AS(k->cross_entropy(logits, bad_onehot, dl, 1.0f), std::invalid_argument);
  Tensor empty_logits = cpu_ctx().empty({0, 4}), empty_labels = cpu_ctx().empty({0}, DType::I32), none;
  LossStats s = k->cross_entropy(empty_logits, empty_labels, none, 1.0f);
  CHECK(s.count == 0);
  CHECK(s.loss_sum == 0.0);
}
