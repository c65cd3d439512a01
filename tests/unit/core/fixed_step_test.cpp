// The step as a fixed program, one replica: its per-step values read from memory (StepScalars)
// give the bits of the ordinary step; on a GPU, recorded once as a CUDA graph and replayed, the
// same bits again, its statistics read at once or late; evaluation as a program; a GPT's token ids
// checked where the program runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "fixed_step_util.h"
#include "test_devices.h"
#include "transformer_block.h"

using namespace trainer;
using namespace trainer::test_fixed;

namespace {

// Deferred: Recorded with the statistics read back behind each step and read two steps later
// (PendingSteps held to its lag, as a GPU's loop reads them).
enum class Path { Ordinary, Fixed, Recorded, Deferred };

struct Outcome {
  std::vector<float> weights;
  std::vector<double> losses;
  int recorded = 0;
  uint64_t last_waits = 0;  // the host's waits for the device (host_waits) over steps 7 to 9
  HostCallTimes last_calls;  // this thread's host calls over steps 7 to 9 (differences)
};

// 10 steps (batch 6 four times, then 4 three times — an epoch's uneven end —, then 6 again) at a
// rate that changes every step, on `device`, by `path`: each size runs as launched, is recorded and
// is replayed.
Outcome train(const RunSpec& e, Device device, Path path, int classes = 5) {
  Replica rep(trainee_spec(e), device, device.is_cpu() ? 2 : 0);
  rep.context().bind_thread();
  const HostBatch six = batch(6, classes), four = batch(4, classes);
  Outcome out;
  struct Read {
    StepStats stats;
    int64_t batch = 0;
  };
  PendingSteps<Read> pending(2, true);
  auto read = [&](bool all) {
    for (Read r; pending.next(r, all);) {
      const LossStats st = r.stats.get();
      out.losses.push_back(st.loss_sum);
      CHECK(st.count == r.batch);
    }
  };
  uint64_t waits = 0;
  HostCallTimes calls;
  for (int s = 0; s < 10; ++s) {
    if (s == 7) waits = host_waits(), calls = host_call_times();
    const HostBatch& b = s >= 4 && s < 7 ? four : six;
    const float lr = 0.05f / float(1 + s);
    const uint64_t seed = 1000 + uint64_t(s);
    const StepStats st = path == Path::Ordinary
                             ? StepStats(rep.train_step(b.images, b.labels, lr, seed))
                             : rep.fixed_step(b.images, b.labels, lr, 1.0f / float(b.images.dim(0)), seed,
                                              path != Path::Fixed, nullptr, {}, {}, path == Path::Deferred);
    CHECK(st.pending() == (path == Path::Deferred));
    pending.push({st, b.images.dim(0)});
    read(path != Path::Deferred);
  }
  out.last_waits = host_waits() - waits;
  out.last_calls = host_calls_since(calls);
  read(true);
  out.weights = rep.executor().params().download(rep.context());
  out.recorded = rep.recorded_steps();
  return out;
}

void check_same(const Outcome& a, const Outcome& b) {
  REQUIRE(a.weights.size() == b.weights.size());
  CHECK(a.losses == b.losses);
  size_t differ = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) differ += std::memcmp(&a.weights[i], &b.weights[i], sizeof(float)) != 0;
  INFO(differ << " of " << a.weights.size() << " weights differ");
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("fixed step: values read from step memory give the ordinary step's bits (sgd, adam, rmsprop, dropout, both losses)", "[backends]") {
  for (const char* opt : {"{type: sgd, lr: 0.05, momentum: 0.9, nesterov: true}", "{type: adam, lr: 0.01}",
                          "{type: adamw, lr: 0.01}", "{type: rmsprop, lr: 0.01, momentum: 0.5, centered: true}"})
    for (const test::TestDevice& d : test::test_devices()) {
      SECTION(d.name + " " + opt) {
        const RunSpec e = spec({std::string("optimizer=") + opt});
        const Outcome ordinary = train(e, d.device, Path::Ordinary), fixed = train(e, d.device, Path::Fixed);
        check_same(ordinary, fixed);
        check_same(ordinary, train(e, d.device, Path::Deferred));  // statistics read two steps late: the same
        // The run is not trivial: the weights moved and the loss changed.
        CHECK(ordinary.losses.front() != ordinary.losses.back());
      }
    }
  // Binary cross-entropy over a sigmoid output.
  for (const test::TestDevice& d : test::test_devices()) {
    SECTION(d.name + " binary_crossentropy") {
      const RunSpec e = spec({"model.layers.8.units=1", "model.layers.9.type=sigmoid", "train.loss=binary_crossentropy",
                              "data.train.classes=2"});
      check_same(train(e, d.device, Path::Ordinary, 2), train(e, d.device, Path::Fixed, 2));
    }
  }
}

TEST_CASE("fixed step: CUDA graphs on and off give the same bits after 10 steps") {
  const test::TestDevice* gpu = test::test_gpu();  // a skip, with the reason, where no GPU can run
  if (!gpu) return;
  for (const char* opt : {"{type: sgd, lr: 0.05, momentum: 0.9}", "{type: adam, lr: 0.01}"}) {
    INFO(opt);
    const RunSpec e = spec({std::string("optimizer=") + opt, "devices.tf32=false"});
    const Outcome off = train(e, gpu->device, Path::Fixed), on = train(e, gpu->device, Path::Recorded);
    check_same(off, on);
    check_same(train(e, gpu->device, Path::Ordinary), on);
    // The same replayed, each step's statistics read back behind it and read two steps later.
    const Outcome deferred = train(e, gpu->device, Path::Deferred);
    check_same(on, deferred);
    CHECK(deferred.recorded == 2);
    // A replayed step read at once waits for the device once; read two steps late, never (a wait
    // for an older step while a later one runs is not a sync).
    CHECK(on.last_waits == 3);
    CHECK(deferred.last_waits == 0);
    // This thread's share of them, its copies into staging (the batch, the labels, step memory)
    // and its replays' launches: none where nothing was recorded.
    CHECK(on.last_calls.waits == on.last_waits);
    CHECK(on.last_calls.staging_ns > 0);
    CHECK(on.last_calls.launch_ns > 0);
    CHECK(off.last_calls.launch_ns == 0);
    // Batch sizes 6 and 4 were each recorded once (their first step plans, the second records).
    CHECK(on.recorded == 2);
    CHECK(off.recorded == 0);
  }
}

TEST_CASE("fixed step: evaluation as a program gives eval_step's bits (batch sizes, both losses, a bad label)", "[backends]") {
  for (const test::TestDevice& d : test::test_devices())
    for (const bool binary : {false, true}) {
      SECTION(d.name + (binary ? " binary_crossentropy" : " cross_entropy")) {
        const RunSpec e = binary ? spec({"model.layers.8.units=1", "model.layers.9.type=sigmoid",
                                         "train.loss=binary_crossentropy", "data.train.classes=2", "devices.tf32=false"})
                                 : spec({"devices.tf32=false"});
        const int classes = binary ? 2 : 5;
        Replica rep(trainee_spec(e), d.device, d.device.is_cpu() ? 2 : 0);
        rep.context().bind_thread();
        // Trained a little first: batch-norm statistics and weights away from their start.
        for (int s = 0; s < 3; ++s) {
          const HostBatch b = batch(6, classes, 70 + uint64_t(s));
          rep.train_step(b.images, b.labels, 0.05f, 100 + uint64_t(s));
        }
        // Each size three times: launched, recorded, replayed where a GPU records.
        const std::vector<int64_t> sizes{6, 6, 6, 4, 4, 4, 1};
        // Every batch's statistics read back behind its program and read only after the last
        // (7 < OpContext::kReadBackSlots): each still its own.
        std::vector<StepStats> pending;
        std::vector<LossStats> fixed, ordinary;
        for (size_t i = 0; i < sizes.size(); ++i) {
          const HostBatch b = batch(sizes[i], classes, 9 + i);
          pending.push_back(rep.fixed_eval(b.images, b.labels, true));
          CHECK(pending.back().pending());
        }
        for (StepStats& p : pending) fixed.push_back(p.get());
        const int recorded = rep.recorded_steps();
        for (size_t i = 0; i < sizes.size(); ++i) {
          const HostBatch b = batch(sizes[i], classes, 9 + i);
          ordinary.push_back(rep.eval_step(b.images, b.labels));
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
          INFO("batch " << i << " of " << sizes[i] << ": " << fixed[i].loss_sum << " / " << ordinary[i].loss_sum);
          CHECK(same_double(fixed[i].loss_sum, ordinary[i].loss_sum));
          CHECK(fixed[i].correct == ordinary[i].correct);
          CHECK(fixed[i].count == sizes[i]);
        }
        CHECK(fixed[0].loss_sum != fixed[3].loss_sum);  // different batches, different sums
        if (!d.device.is_cpu()) CHECK(recorded == 2);  // 6 and 4 recorded; 1 only launched once
        HostBatch bad = batch(4, classes, 3);
        bad.labels.i32()[2] = classes + 3;
        CHECK_THROWS_AS(rep.fixed_eval(bad.images, bad.labels, true).get(), std::out_of_range);
      }
    }
}

TEST_CASE("fixed step: a GPT's token ids are checked where the program runs — good ids give the ordinary step's bits, "
          "a bad id is reported when the step is read, with the ordinary step's message", "[backends]") {
  const std::string yaml = std::string("name: lm\nseed: 3") + test::kGptModel + "data:\n  train: {type: synthetic}\n";
  const RunSpec e = read_run_spec(cfg::parse_document(yaml, "lm.yaml", {"devices.tf32=false"}));
  // n windows of 6 byte ids, each position's label the next byte.
  auto windows = [](int64_t n, uint64_t seed) {
    HostBatch b{Tensor::empty(Shape{n, 6}), Tensor::empty(Shape{n, 6}, DType::I32)};
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < n * 6; ++i) {
      b.images.f32()[i] = float(rng() % 256);
      b.labels.i32()[i] = int32_t(rng() % 256);
    }
    return b;
  };
  for (const test::TestDevice& d : test::test_devices())
    SECTION(d.name) {
      Replica fixed(trainee_spec(e), d.device, d.device.is_cpu() ? 2 : 0), ordinary(trainee_spec(e), d.device, d.device.is_cpu() ? 2 : 0);
      fixed.context().bind_thread();
      // Four steps of batch 3 (a GPU launches, records, replays twice): the same bits.
      for (int s = 0; s < 4; ++s) {
        const HostBatch b = windows(3, 40 + uint64_t(s));
        const LossStats f = fixed.fixed_step(b.images, b.labels, 0.01f, 1.0f / 18.0f, 200 + uint64_t(s), true).get();
        const LossStats o = ordinary.train_step(b.images, b.labels, 0.01f, 200 + uint64_t(s));
        CHECK(same_double(f.loss_sum, o.loss_sum));
        CHECK(f.count == 18);
      }
      CHECK(fixed.executor().params().download(fixed.context()) == ordinary.executor().params().download(ordinary.context()));
      if (!d.device.is_cpu()) CHECK(fixed.recorded_steps() == 1);  // the embedding no longer waits for the GPU
      // Evaluation: an id outside the vocabulary and one that is no integer, at [2, 1] of the ids.
      for (const float v : {300.0f, 2.5f}) {
        INFO("id " << v);
        HostBatch bad = windows(3, 9);
        bad.images.f32()[13] = v;
        std::string said;
        try {
          (void)ordinary.eval_step(bad.images, bad.labels);
        } catch (const std::runtime_error& x) {
          said = x.what();
        }
        CHECK_THAT(said, Catch::Contains("embedding: id") && Catch::Contains("at [2, 1] is"));
        // Twice: launched, then (a GPU) recorded — the recorded check notes it where the kernels run.
        for (int i = 0; i < 2; ++i) {
          StepStats st;
          REQUIRE_NOTHROW(st = fixed.fixed_eval(bad.images, bad.labels, true));  // nothing waits for the ids
          CHECK(st.pending());
          CHECK_THROWS_WITH(st.get(), said);
        }
        // A later good batch is not blamed (the note is the step's own).
        const HostBatch good = windows(3, 10);
        CHECK(fixed.fixed_eval(good.images, good.labels, true).get().count == 18);
      }
    }
}
