// Gradient accumulation (train.accumulate) with a pipeline and with hybrid copies of it, on
// virtual CPU devices: k micro-batches train as one batch, clipping acts on the summed gradient,
// an inf in one micro-batch skips the whole step.
#include <catch2/catch.hpp>

#include "pipeline_models.h"

using namespace trainer;
using namespace trainer::pipeline_test;

TEST_CASE("device parallel and hybrid: gradient accumulation, k micro-batches of 12/k match one batch of 12 (10 steps, 1e-5)",
          "[device_parallel]") {
  // BN-free models (batch norm normalises each micro-batch by its own statistics). The seeds
  // differ per micro-batch, as in training; neither model has dropout.
  for (const char* yaml : {kCnn, kSharedLstm}) {
    const bool lstm = yaml == kSharedLstm;
    const int classes = lstm ? 2 : 5;
    for (int M : {1, 2}) {
      RunSpec e = experiment(yaml, {"pipeline.microbatches=" + std::to_string(M)});
      auto whole = train_placed(e, 10, classes);
      for (int k : {2, 3}) {
        const double d = max_diff(whole, train_placed(e, 10, classes, nullptr, -1, k));
        WARN((lstm ? "shared LSTM" : "CNN") << ", one pipeline, M = " << M << ": " << k
             << " accumulated micro-batches vs one batch of 12: max |dw| = " << d);
        CHECK(d <= 1e-5);
      }
      bool same = false;
      const double h = max_diff(whole, train_hybrid(e, 2, 10, classes, &same, -1, 2));
      WARN((lstm ? "shared LSTM" : "CNN") << ", hybrid 2 copies, M = " << M
           << ": 2 accumulated micro-batches of 3 per copy vs one pipeline with the batch of 12: max |dw| = " << h);
      CHECK(same);
      CHECK(h <= 1e-5);
    }
  }
  // The control: one micro-batch's gradient alone (divided by the whole step's samples) is not the step's.
  RunSpec e = experiment(kCnn);
  RunSpec half = e;
  half.train.accumulate = 2;
  PipelineCopy w(trainee_spec(half), cpus(half), 1);
  bool stop = false;
  for (int s = 0; s < 10; ++s) {
    Batch all = random_batch(input_shapes(e), 12, 5, uint32_t(100 + s));
    w.train_step(rows(all, 6, 12, 6), 0.05f, uint64_t(s), stop, MicroStep{1, 2, 12});
  }
  CHECK(max_diff(train_placed(e, 10, 5), by_name(w.state())) > 1e-3);
}

TEST_CASE("device parallel and hybrid with accumulation: clipping acts on the summed gradient, and an inf in one "
          "micro-batch skips the whole step", "[device_parallel]") {
  for (const char* set : {"train.clip_norm=0.05", "train.loss_scale=dynamic"}) {
    INFO(set);
    RunSpec e = experiment(kCnn, {set, "pipeline.microbatches=2"});
    const int poison = std::string(set).find("loss_scale") != std::string::npos ? 3 : -1;
    std::vector<double> n1, n2;
    auto whole = train_placed(e, 10, 5, &n1, poison);
    auto acc = train_placed(e, 10, 5, &n2, poison, 2);
    bool same = false;
    auto hybrid = train_hybrid(e, 2, 10, 5, &same, poison, 2);
    const double d = max_diff(whole, acc), h = max_diff(whole, hybrid);
    WARN("CNN with " << set << (poison >= 0 ? " and an inf at step 3" : "") << ": 2 accumulated micro-batches vs one batch: "
         << "max |dw| = " << d << "; hybrid 2 copies x 2 micro-batches: " << h);
    CHECK(d <= 1e-5);
    CHECK(h <= 1e-5);
    CHECK(same);
    REQUIRE(n1.size() == n2.size());
    for (size_t s = 0; s < n1.size(); ++s) {
      if (poison < 0) CHECK(n1[s] > 0.05);  // clipping in force at every step
      CHECK((std::isnan(n1[s]) ? std::isnan(n2[s]) : std::abs(n1[s] - n2[s]) <= 1e-5 * n1[s]));
    }
    if (poison >= 0) CHECK(max_diff(whole, train_placed(experiment(kCnn, {"pipeline.microbatches=2"}), 10, 5)) > 1e-4);
  }
}
