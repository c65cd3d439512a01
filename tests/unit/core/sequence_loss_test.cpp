// Language-model pieces: the per-position cross-entropy (logits [N, T, C], labels [N, T]) against its rows' form, and a causal GPT's scores at a position independent of the bytes after it.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/graph/loss.h"
#include "core/ops/context.h"
#include "core/run/plan.h"
#include "core/run/spec.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/trainee.h"
#include "transformer_block.h"

using namespace trainer;

namespace {

Tensor random_logits(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::empty(s);
  std::uniform_real_distribution<float> u(-4, 4);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
  return t;
}

Tensor random_labels(const Shape& s, int C, std::mt19937& rng) {
  Tensor t = Tensor::empty(s, DType::I32);
  for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = int32_t(rng() % uint32_t(C));
  return t;
}

}  // namespace

// Keras's sparse cross-entropy over a [N, T, C] output: the mean over the N*T positions. With the
// step's scale 1/(N*T) (scored_labels), each position's gradient is (softmax - onehot) / (N*T),
// and the statistics count positions.
TEST_CASE("sparse cross-entropy per position: logits [N, T, C] score N*T rows, each weighing 1/(N*T)") {
  auto cpu = make_context(Device::cpu(0));
  auto loss = make_loss("sparse_categorical_crossentropy", *cpu);
  auto rows = make_kernel<SoftmaxKernel>(*cpu, SoftmaxParams{});
  CHECK(loss->check_logits(Shape{7, 11}).empty());
  CHECK(loss->check_logits(Shape{11}).empty());
  CHECK_THAT(loss->check_logits(Shape{2, 3, 4}), Catch::Contains("one per position, [time, classes]"));
  std::mt19937 rng(5);
  for (auto [N, T, C] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2}, {3, 7, 11}, {4, 16, 256}, {0, 5, 3}}) {
    INFO(N << " x " << T << " positions, " << C << " classes");
    const Tensor logits = random_logits({N, T, C}, rng), labels = random_labels({N, T}, int(C), rng);
    Tensor d = Tensor::empty({N, T, C}), want_d = Tensor::empty({N * T, C});
    Batch b;
    b.images = Tensor::empty({N, T});
    b.labels = labels;
    b.size = b.global_size = N;
    CHECK(scored_labels(b) == N * T);
    const float scale = 1.0f / float(std::max<int64_t>(N * T, 1));
    const LossStats got = loss->compute(logits, labels, d, scale);
    const LossStats want = rows->cross_entropy(logits.reshape({N * T, C}), labels.reshape({N * T}), want_d, scale);
    CHECK(got.count == N * T);
    CHECK(got.correct == want.correct);
    CHECK(got.loss_sum == want.loss_sum);
    for (int64_t i = 0; i < d.numel(); ++i) REQUIRE(d.f32()[i] == want_d.f32()[i]);
    // The recorded step's form: the scale from StepScalars, the statistics added to LossSums.
    StepScalars step;
    step.loss_scale = scale;
    LossSums sums;
    Tensor d2 = Tensor::empty({N, T, C});
    loss->compute_into(logits, labels, d2, &step, &sums);
    CHECK(sums.count == N * T);
    CHECK(sums.loss_sum == want.loss_sum);
    for (int64_t i = 0; i < d2.numel(); ++i) REQUIRE(d2.f32()[i] == want_d.f32()[i]);
  }
  Tensor none;
  CHECK_THROWS_WITH(loss->compute(random_logits({2, 3, 4}, rng), random_labels({2}, 4, rng), none, 1.0f),
                    Catch::Contains("the labels must be class indices [2, 3] (one per position), got i32 2"));
}

// train.ignore_class over positions: pad positions (label -100) score nothing and are not
// counted; the step divides by the labels scored over the global batch, which the loader counts
// over every replica's samples (Loader::global_scored, Batch::global_scored), so the loss is the
// mean over the scored positions, PyTorch's cross_entropy(ignore_index) and Keras's ignore_class.
TEST_CASE("sparse cross-entropy per position with ignore_class: pads score nothing, the loader counts the global batch's scored labels") {
  auto cpu = make_context(Device::cpu(0));
  LossOptions o;
  o.ignore_class = -100;
  auto loss = make_loss("sparse_categorical_crossentropy", *cpu, o);
  auto rows = make_kernel<SoftmaxKernel>(*cpu, SoftmaxParams{});
  std::mt19937 rng(6);
  const int64_t N = 5, T = 6, C = 9;
  const Tensor logits = random_logits({N, T, C}, rng);
  Tensor labels = random_labels({N, T}, int(C), rng);
  for (int64_t i = 0; i < N; ++i)  // sample i keeps its first i + 1 positions (sample 4: all six)
    for (int64_t t = i + 1; t < T; ++t) labels.i32()[i * T + t] = -100;
  Tensor d = Tensor::empty({N, T, C});
  const LossStats got = loss->compute(logits, labels, d, 0.5f);
  CHECK(got.count == 1 + 2 + 3 + 4 + 5);
  double want = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = 0; t < T; ++t) {
      float* row = d.f32() + (i * T + t) * C;
      if (t > i) {
        for (int64_t j = 0; j < C; ++j) REQUIRE(row[j] == 0.0f);
        continue;
      }
      Tensor one = Tensor::empty({1, C}), lab = Tensor::empty({1}, DType::I32), d1 = Tensor::empty({1, C});
      std::copy_n(logits.f32() + (i * T + t) * C, C, one.f32());
      lab.i32()[0] = labels.i32()[i * T + t];
      want += rows->cross_entropy(one, lab, d1, 0.5f).loss_sum;
      for (int64_t j = 0; j < C; ++j) REQUIRE(row[j] == d1.f32()[j]);
    }
  CHECK(got.loss_sum == Approx(want).epsilon(1e-12));
  CHECK_THROWS_AS(make_loss("binary_crossentropy", *cpu, o), std::invalid_argument);
}

// What `trainer generate` relies on: the scores at positions 0..n-1 of a causal model do not depend
// on the window's bytes after n-1 (every layer is per position, the attention causal).
TEST_CASE("a causal GPT's scores at a position do not depend on the bytes after it, and a non-causal one's do") {
  for (bool causal : {true, false}) {
    std::string yaml = std::string("name: lm\nseed: 3") + test::kGptModel + "data:\n  train: {type: synthetic}\n";
    if (!causal) yaml.replace(yaml.find("causal: true"), 12, "causal: false");
    const RunSpec e = read_run_spec(cfg::parse_document(yaml, "lm.yaml"));
    Replica r(trainee_spec(e), Device::cpu(0), 1);
    std::mt19937 rng(9);
    Tensor a = Tensor::empty({1, 6}), b = Tensor::empty({1, 6});
    for (int64_t t = 0; t < 6; ++t) a.f32()[t] = b.f32()[t] = float(rng() % 256);
    for (int64_t t = 3; t < 6; ++t) b.f32()[t] = float((int(a.f32()[t]) + 1 + int(rng() % 200)) % 256);
    std::vector<float> la, lb;
    r.logits(a, la);
    r.logits(b, lb);
    REQUIRE(la.size() == 6 * 256);
    double before = 0, after = 0;  // the largest score difference at positions 0..2, and 3..5
    for (size_t i = 0; i < la.size(); ++i) {
      double& m = i < 3 * 256 ? before : after;
      m = std::max(m, double(std::fabs(la[i] - lb[i])));
    }
    INFO((causal ? "causal" : "not causal") << ": max score difference before position 3 " << before << ", after "
                                            << after);
    CHECK(after > 1e-4);  // the changed bytes do change their own positions' scores
    if (causal)
      CHECK(before == 0.0);
    else
      CHECK(before > 1e-6);
  }
}
