// A pipeline's step as its stages' fixed programs (PipelineCopy::fixed_step; CUDA graphs where the
// stages record), run as called on virtual CPU devices: the ordinary step's bits — per micro-batch
// dropout seeds, the loss's scale and sums from step memory, the boundaries' hand-offs, accumulation,
// a boundary that carries no gradient back — and a bad token id reported with the ordinary message.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "pipeline_models.h"

using namespace trainer;
using namespace trainer::pipeline_test;

namespace {

// A GPT cut inside its block (attention on the second device), with attention dropout and a
// dropout layer: two boundaries (the first layer norm's output, the positions' for the residual).
const char* const kDropGpt = R"(
name: drop_gpt
seed: 9
model:
  input: [6]
  layers:
    - {name: tok, type: embedding, input_dim: 256, output_dim: 8}
    - {name: pos, type: position_embedding}
    - {name: ln1, type: layer_norm}
    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 4, causal: true, dropout: 0.2}
    - {name: res1, type: add, inputs: [pos, attn]}
    - {name: drop, type: dropout, rate: 0.25}
    - {name: ln, type: layer_norm}
    - {name: head, type: dense, units: 256}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: adam, lr: 0.01}
strategy: device_parallel
placement: {tok: cpu:0, attn: cpu:1}
)";

// A CNN whose second stage drops out.
const char* const kDropCnn = R"(
name: drop_cnn
seed: 5
model:
  input: [8, 8, 3]
  layers:
    - {name: conv1, type: conv2d, filters: 6, kernel: 3, padding: same}
    - {name: relu1, type: relu}
    - {name: conv2, type: conv2d, filters: 8, kernel: 3, strides: 2, padding: same}
    - {name: drop, type: dropout, rate: 0.3}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
strategy: device_parallel
placement: {conv1: cpu:0, conv2: cpu:1}
)";


struct Trained {
  std::map<std::string, std::vector<float>> weights;
  std::vector<double> losses;
  int64_t programs = 0;
  float scale = 0;     // the loss scale at the end
  double norm = 0;     // the last step's gradient norm (clip_norm), as the host reports it
};

// `steps` steps of 12 samples (k micro-batches of 12/k with train.accumulate k), as programs or not;
// step `poison`'s first input element an inf (its loss and gradients not finite).
Trained train(RunSpec e, int steps, int classes, int accumulate, bool program, int poison = -1) {
  e.train.accumulate = accumulate;
  PipelineCopy w(trainee_spec(e), cpus(e), 1);
  w.set_fixed_anywhere(program);
  Trained out;
  bool stop = false;
  for (int s = 0; s < steps; ++s) {
    Batch all = random_batch(e, 12, classes, uint32_t(100 + s));
    if (s == poison) all.images.f32()[0] = std::numeric_limits<float>::infinity();
    for (int i = 0; i < accumulate; ++i) {
      const int64_t lo = 12 * i / accumulate, hi = 12 * (i + 1) / accumulate;
      const LossStats l = w.train_step(rows(all, lo, hi, hi - lo), 0.05f, uint64_t(s * accumulate + i), stop,
                                       MicroStep{i, accumulate, accumulate > 1 ? scored_labels(all) : 0});
      out.losses.push_back(l.loss_sum);
    }
  }
  out.weights = by_name(w.state());
  out.programs = w.program_steps();
  out.scale = w.scaler().scale();
  out.norm = w.clip().grad_norm();
  return out;
}

// The same bits, NaN (a poisoned step's loss) included.
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

void check_same(const std::string& yaml, const std::vector<std::string>& sets, int classes, int accumulate,
                int poison = -1) {
  RunSpec e = experiment(yaml, sets);
  const Trained ordinary = train(e, 4, classes, accumulate, false, poison),
                program = train(e, 4, classes, accumulate, true, poison);
  CHECK(ordinary.programs == 0);
  CHECK(program.programs == 4 * accumulate);  // every micro-batch ran as the stages' programs
  CHECK(same_bits(program.losses, ordinary.losses));
  CHECK(max_diff(program.weights, ordinary.weights) == 0.0);
  CHECK(program.scale == ordinary.scale);
  CHECK(std::memcmp(&program.norm, &ordinary.norm, sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("pipeline program: the stages' programs give the ordinary step's bits (dropout per micro-batch, M = 1, 2, 3)",
          "[device_parallel]") {
  for (int M : {1, 2, 3}) {
    INFO("M = " << M);
    const std::string m = "pipeline.microbatches=" + std::to_string(M);
    check_same(kDropCnn, {m}, 5, 1);
    check_same(kDropGpt, {m}, 256, 1);
    check_same(kDeadEnd, {m}, 5, 1);
  }
}

TEST_CASE("pipeline program: accumulated micro-batches (held sums inside the programs) give the ordinary step's bits",
          "[device_parallel]") {
  for (int k : {2, 3}) {
    INFO("train.accumulate " << k);
    check_same(kDropCnn, {"pipeline.microbatches=2"}, 5, k);
    check_same(kDropGpt, {"pipeline.microbatches=2"}, 256, k);
  }
}

TEST_CASE("pipeline program: batches of several sizes view the same boundary buffers (made again only when a "
          "micro-batch outgrows them) and give the ordinary step's bits",
          "[device_parallel]") {
  // M = 2: 12 rows make the buffers (6 + 6), 6 and 12 view them, 16 (8 + 8) outgrows them once, 12
  // and 7 (3 + 4) view them again. Before, every change of size made them again, and a recorded
  // stage recorded again (a short last batch and evaluation: every epoch).
  const RunSpec e = experiment(kDropGpt, {"pipeline.microbatches=2"});
  const std::vector<int64_t> sizes{12, 6, 12, 16, 12, 7};
  const std::vector<uint64_t> made{1, 1, 1, 2, 2, 2};
  std::vector<double> losses[2];
  std::vector<uint64_t> generations[2];
  std::map<std::string, std::vector<float>> weights[2];
  for (const int program : {0, 1}) {
    PipelineCopy w(trainee_spec(e), cpus(e), 1);
    w.set_fixed_anywhere(program == 1);
    bool stop = false;
    for (size_t s = 0; s < sizes.size(); ++s) {
      const Batch b = random_batch(e, sizes[s], 256, uint32_t(200 + s));
      losses[program].push_back(w.train_step(b, 0.05f, uint64_t(s), stop, MicroStep{0, 1, 0}).loss_sum);
      generations[program].push_back(w.boundary_generation());
    }
    weights[program] = by_name(w.state());
    if (program) CHECK(w.program_steps() == int64_t(sizes.size()));
  }
  CHECK(generations[0] == made);
  CHECK(generations[1] == made);
  CHECK(losses[1] == losses[0]);
  CHECK(max_diff(weights[1], weights[0]) == 0.0);
}

TEST_CASE("pipeline program: loss scaling and clipping decided inside the stages' programs from every stage's measure "
          "give the ordinary step's bits (a skipped step, both clip forms, accumulation)",
          "[device_parallel]") {
  // Each stage measures its gradients (finite, sum of squares), sends the measure to every other
  // stage, and decides from all of them in stage order, as StepUpdate::apply does on the host.
  const std::vector<std::vector<std::string>> cases{
      {"train.clip_norm=0.05"},
      {"train.clip_value=0.002"},
      {"train.loss_scale={init_scale: 1024, growth_interval: 2}"},
      {"train.clip_norm=0.05", "train.loss_scale={init_scale: 4096, growth_interval: 3}"},
      {"train.clip_value=0.002", "train.loss_scale=1000"}};
  for (const std::vector<std::string>& c : cases) {
    std::vector<std::string> sets = c;
    sets.push_back("pipeline.microbatches=2");
    INFO(c[0] << (c.size() > 1 ? ", " + c[1] : std::string()));
    check_same(kDropCnn, sets, 5, 1);
    check_same(kDropGpt, sets, 256, 1);
    check_same(kDropCnn, sets, 5, 2);
    if (c.back().rfind("train.loss_scale", 0) == 0) check_same(kDropCnn, sets, 5, 1, 2);  // step 2 skipped
  }
}

TEST_CASE("pipeline program: a layer shared across stages (its copies' gradients summed in copy order inside the "
          "programs) gives the ordinary step's bits, and with clipping it runs the ordinary step",
          "[device_parallel]") {
  // The shared LSTM's two copies on cpu:1 and cpu:2: each copies its gradient into the other's
  // memory and adds them in copy order, as sum_shared_gradients does on the host.
  for (int M : {1, 2}) {
    INFO("M = " << M);
    const std::string m = "pipeline.microbatches=" + std::to_string(M);
    check_same(kSharedLstm, {m}, 2, 1);
    check_same(kSharedLstm, {m}, 2, 2);
    check_same(kSharedLstm, {m, "train.loss_scale={init_scale: 1024, growth_interval: 2}"}, 2, 1, 2);  // step 2 skipped
  }
  // The norm (clip_norm's; the one clip_value reports) counts the shared layer once (StepUpdate's
  // counted_elsewhere), which the stages' measures do not: clipping runs the ordinary step.
  for (const char* clip : {"train.clip_norm=0.05", "train.clip_value=0.01"}) {
    const Trained t = train(experiment(kSharedLstm, {clip}), 2, 2, 1, true);
    CHECK(t.programs == 0);
  }
}

TEST_CASE("pipeline program: a bad token id is reported with the ordinary step's message", "[device_parallel]") {
  RunSpec e = experiment(kDropGpt, {"pipeline.microbatches=2"});
  for (const float v : {300.0f, 2.5f}) {
    INFO("id " << v);
    std::string said[2];
    for (int program = 0; program < 2; ++program) {
      PipelineCopy w(trainee_spec(e), cpus(e), 1);
      w.set_fixed_anywhere(program == 1);
      bool stop = false;
      (void)w.train_step(random_batch(e, 12, 256, 6), 0.05f, 0, stop);  // a good step first
      CHECK(w.program_steps() == program);
      Batch b = random_batch(e, 12, 256, 7);
      b.images.f32()[6 * 8 + 1] = v;  // sample 8 (micro-batch 1's row 2), position 1
      try {
        (void)w.train_step(b, 0.05f, 1, stop);
      } catch (const std::runtime_error& x) {
        said[program] = x.what();
      }
    }
    CHECK_THAT(said[0], Catch::Contains("embedding: id"));
    CHECK(said[1] == said[0]);
  }
}
