// Hybrid copies of a pipeline and train.ema with their step as the stages' fixed programs (CUDA
// graphs where the stages record), run as called on virtual CPU devices: each stage's sum over the
// copies, copy 0's batch-norm statistics, sync_bn, loss scaling, clipping, accumulation and the
// moving average inside the programs give the ordinary step's bits, and every copy stays identical.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "pipeline_models.h"

using namespace trainer;
using namespace trainer::pipeline_test;

namespace {

// kCnn with a batch norm on the second stage (its statistics: copy 0's broadcast after each update,
// or summed over the copies with sync_bn) and a dropout (a seed per micro-batch).
std::string bn_cnn() {
  std::string y = kCnn;
  y.replace(y.find("    - {name: relu1"), 0, "    - {name: bn, type: batchnorm}\n");
  y.replace(y.find("    - {name: flat"), 0, "    - {name: drop, type: dropout, rate: 0.3}\n");
  return y;
}

struct Run {
  std::vector<std::vector<float>> weights;  // per copy, after the last step
  std::vector<float> average;               // copy 0's train.ema, where on
  std::vector<double> losses;               // copy 0's per micro-batch (the agreed statistics)
  int64_t programs = 0, reduced = 0;        // copy 0's micro-batches run as programs; its steps summed
};

// `copies` copies (1: a plain pipeline) for `steps` steps of 12 samples, each copy's rows cut into
// `accumulate` micro-batches; as the stages' programs or the ordinary way.
Run train(RunSpec e, int copies, int steps, int classes, int accumulate, bool program) {
  e.strategy = copies > 1 ? StrategyKind::Hybrid : StrategyKind::DeviceParallel;
  e.train.accumulate = accumulate;
  std::vector<Device> devices;
  for (size_t d = 0; d < size_t(copies) * e.placement.devices.size(); ++d) devices.push_back(Device::cpu(int(d)));
  std::unique_ptr<Strategy> s = strategy_type(e.strategy).make(trainee_spec(e), devices, 1);
  REQUIRE(s->size() == copies);
  for (int r = 0; r < copies; ++r) dynamic_cast<PipelineCopy&>(s->trainee(r)).set_fixed_anywhere(program);
  Run out;
  out.weights.resize(size_t(copies));
  s->run([&](Trainee& t) {
    t.broadcast_parameters();
    bool stop = false;
    for (int step = 0; step < steps; ++step) {
      Batch all = random_batch(e, 12, classes, uint32_t(100 + step));
      const int64_t lo = 12 * t.rank() / copies, hi = 12 * (t.rank() + 1) / copies, n = hi - lo;
      for (int i = 0; i < accumulate; ++i) {
        const LossStats l = t.train_step(rows(all, lo + n * i / accumulate, lo + n * (i + 1) / accumulate, 12 / accumulate),
                                         0.05f, uint64_t(step * accumulate + i), stop,
                                         MicroStep{i, accumulate, accumulate > 1 ? scored_labels(all) : 0});
        if (t.rank() == 0) out.losses.push_back(l.loss_sum);
      }
    }
    out.weights[size_t(t.rank())] = t.state().download_weights();
  });
  auto& copy0 = dynamic_cast<PipelineCopy&>(s->trainee(0));
  out.programs = copy0.program_steps();
  out.reduced = copy0.reduced_steps();
  if (copy0.state().has_average()) out.average = copy0.state().download_average();
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

void check_same(const std::string& yaml, const std::vector<std::string>& sets, int copies, int classes, int accumulate) {
  const RunSpec e = experiment(yaml, sets);
  const int steps = 4;
  const Run ordinary = train(e, copies, steps, classes, accumulate, false), program = train(e, copies, steps, classes, accumulate, true);
  CHECK(ordinary.programs == 0);
  CHECK(program.programs == steps * accumulate);  // every micro-batch ran as the stages' programs
  CHECK(program.reduced == ordinary.reduced);
  CHECK(same_bits(program.losses, ordinary.losses));
  for (int r = 0; r < copies; ++r) {
    INFO("copy " << r);
    CHECK(program.weights[size_t(r)] == ordinary.weights[size_t(r)]);
    CHECK(program.weights[size_t(r)] == program.weights[0]);  // the copies stay identical
  }
  CHECK(program.average == ordinary.average);
}

}  // namespace

TEST_CASE("hybrid program: each stage's sum over the copies inside its program gives the ordinary step's bits "
          "(2 and 3 copies, M = 1 and 2, batch-norm statistics broadcast)",
          "[device_parallel]") {
  for (int M : {1, 2}) {
    INFO("M = " << M);
    const std::string m = "pipeline.microbatches=" + std::to_string(M);
    check_same(bn_cnn(), {m}, 2, 5, 1);
    check_same(bn_cnn(), {m}, 3, 5, 1);
    check_same(kGpt, {m}, 2, 5, 1);
    check_same(kSharedLstm, {m}, 2, 2, 1);  // each copy's shared LSTM summed over its stages, then over the copies
  }
}

TEST_CASE("hybrid program: sync_bn, accumulation, loss scaling and clipping inside the programs give the ordinary "
          "step's bits",
          "[device_parallel]") {
  check_same(bn_cnn(), {"train.sync_bn=true", "pipeline.microbatches=2"}, 2, 5, 1);
  check_same(bn_cnn(), {"pipeline.microbatches=2"}, 2, 5, 2);
  check_same(bn_cnn(), {"train.clip_norm=0.05", "train.loss_scale={init_scale: 4096, growth_interval: 2}"}, 2, 5, 1);
  check_same(bn_cnn(), {"train.clip_value=0.002", "pipeline.microbatches=2"}, 2, 5, 2);
}

TEST_CASE("pipeline and hybrid program: train.ema inside the programs gives the ordinary step's average", "[device_parallel]") {
  for (const char* every : {"1", "2"}) {
    INFO("every " << every);
    const std::vector<std::string> sets{"train.ema={decay: 0.9, every: " + std::string(every) + "}",
                                        "pipeline.microbatches=2"};
    check_same(bn_cnn(), sets, 1, 5, 1);
    check_same(bn_cnn(), sets, 2, 5, 1);
    check_same(kGpt, sets, 1, 5, 2);
  }
}
