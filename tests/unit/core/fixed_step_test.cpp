// The step as a fixed program: its per-step values read from memory (StepScalars) give the bits of
// the ordinary step; on a GPU, recorded once as a CUDA graph and replayed, the same bits again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "test_devices.h"

using namespace trainer;

namespace {

// Convolution, batch norm with its fused ReLU, dropout, pooling, dense, softmax: every kind of
// per-step value (the rate, Adam's bias corrections, the loss scale, the dropout seed).
const char* kNet = R"(
name: fixed
model:
  input: [8, 8, 3]
  layers:
    - {name: c1, type: conv2d, filters: 8, kernel: 3, padding: same}
    - {name: bn, type: batchnorm}
    - {name: r1, type: relu}
    - {name: drop, type: dropout, rate: 0.25}
    - {name: pool, type: max_pool2d, pool: 2}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: out, type: softmax}
data:
  train: {type: synthetic, size: 64, shape: [8, 8, 3], classes: 5}
)";

// An environment variable set (null: unset) for a scope, then restored, even when a check throws.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* was = std::getenv(name);
    had_ = was != nullptr;
    if (had_) old_ = was;
    set(value);
  }
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) {
    if (value) setenv(name_, value, 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

RunSpec spec(const std::vector<std::string>& sets) {
  return read_run_spec(cfg::parse_document(kNet, "fixed.yaml", sets));
}

// A fixed batch of `n` samples (the same on every call).
struct HostBatch {
  Tensor images, labels;
};
HostBatch batch(int64_t n, int classes, uint64_t seed = 5) {
  HostBatch b{Tensor::empty(Shape{n, 8, 8, 3}), Tensor::empty(Shape{n}, DType::I32)};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.f32()[i] = nd(rng);
  for (int64_t i = 0; i < n; ++i) b.labels.i32()[i] = int32_t(rng() % uint64_t(classes));
  return b;
}

// Deferred: Recorded with the statistics read back behind each step and read two steps later
// (PendingSteps held to its lag, as a GPU's loop reads them).
enum class Path { Ordinary, Fixed, Recorded, Deferred };

struct Outcome {
  std::vector<float> weights;
  std::vector<double> losses;
  int recorded = 0;
  uint64_t last_waits = 0;  // the host's waits for the device (host_waits) over steps 7 to 9
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
  for (int s = 0; s < 10; ++s) {
    if (s == 7) waits = host_waits();
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
      const RunSpec e = spec({"model.layers.6.units=1", "model.layers.7.type=sigmoid", "train.loss=binary_crossentropy",
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
    // Batch sizes 6 and 4 were each recorded once (their first step plans, the second records).
    CHECK(on.recorded == 2);
    CHECK(off.recorded == 0);
  }
}

namespace {

// What the engine's step (Trainee::train_step) leaves after each of 10 steps of one replica.
struct EngineRun {
  std::vector<float> weights;  // after the last step
  std::vector<double> losses, norms;
  std::vector<float> scales;
  std::vector<int64_t> optimizer_steps, skipped;
  int fixed = 0, recorded = 0;  // steps that ran as the fixed program; of those, replayed recordings
  uint64_t last_waits = 0;      // the host's waits for the device over the last three steps
  std::vector<std::vector<float>> replicas;  // every rank's weights after the last step
  std::vector<float> average;                // train.ema's, rank 0's, after the last step
  int64_t final_steps = 0;                   // the optimizer's count after the last step
};

bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// 10 steps of the replicas on `devices` through Trainee::train_step (batch 6 four times, 4 three
// times, 6 again, each rank its own samples), the fixed program allowed anywhere (`fixed`, the CPU
// running it as called) or not; rank 0's batches of the steps in `poisoned` carry an inf pixel
// (non-finite gradients, on every rank once summed). With train.accumulate k > 1 each step is k
// micro-batches of other samples, the first of a poisoned step carrying the inf (the held sum then
// holds it). Rank 0's view, every rank's last weights in `replicas`. With `lag` >= 0 each step's
// statistics and report are read only `lag` steps later (Trainee::step and PendingSteps, as the
// epoch loop does: the program's state carries the scale and counts from step to step meanwhile);
// the per-step optimizer counts are then not recorded (the host's is ahead until it reads).
EngineRun train_engine(const RunSpec& e, const std::vector<Device>& devices, bool fixed, const std::set<int>& poisoned,
                       int lag = -1) {
  const int k = e.train.accumulate;
  const int ranks = int(devices.size());
  ReplicaGroup group(trainee_spec(e), devices, devices[0].is_cpu() ? (ranks == 1 ? 2 : 1) : 0);
  EngineRun out;
  std::vector<std::vector<float>> replicas(devices.size());
  group.run([&](ReplicaCopy& w) {
    const int r = w.rank();
    w.set_fixed_anywhere(fixed);
    w.broadcast_parameters();
    HostBatch six = batch(6, 5, 5 + 31 * uint64_t(r)), four = batch(4, 5, 5 + 31 * uint64_t(r)),
              bad = batch(6, 5, 5 + 31 * uint64_t(r));
    bad.images.f32()[17] = std::numeric_limits<float>::infinity();
    bool stop = false;
    uint64_t waits = 0;
    EngineRun mine;
    struct Read {
      StepStats stats;
    };
    // (An accumulated step's last micro-batch is read at once, and so followed: no lag there.)
    PendingSteps<Read> pending(k > 1 ? 0 : std::max(lag, 0), true);
    auto read = [&](bool all) {
      for (Read rd; pending.next(rd, all);) {
        mine.losses.push_back(rd.stats.get().loss_sum);
        mine.norms.push_back(rd.stats.grad_norm());
        mine.scales.push_back(w.scaler().enabled() ? float(rd.stats.loss_scale()) : 1.0f);
        mine.skipped.push_back(w.scaler().skipped_total());  // followed up to this step, no further
      }
    };
    for (int s = 0; s < 10; ++s) {
      if (s == 7) waits = host_waits();
      const int64_t n = s >= 4 && s < 7 ? 4 : 6;
      const bool poison = r == 0 && poisoned.count(s);
      LossStats st;
      for (int i = 0; i < k; ++i) {
        HostBatch mb;
        if (k > 1) {
          mb = batch(n, 5, 100 * uint64_t(s) + uint64_t(i) + 10000 * uint64_t(r));
          if (i == 0 && poison) mb.images.f32()[17] = std::numeric_limits<float>::infinity();
        }
        const HostBatch& hb = k > 1 ? mb : poison ? bad : (n == 4 ? four : six);
        Batch b;
        b.images = hb.images;
        b.labels = hb.labels;
        b.size = n;
        b.global_size = n * ranks;
        const MicroStep m{i, k, int64_t(k) * n * ranks};
        if (lag >= 0 && m.last()) pending.push({w.step(b, 0.05f / float(1 + s), 1000 + uint64_t(s * k + i), stop, m)});
        else st = w.train_step(b, 0.05f / float(1 + s), 1000 + uint64_t(s * k + i), stop, m);
        mine.fixed += w.last_step_fixed();
        mine.recorded += w.step_recorded();
      }
      if (lag >= 0) {
        read(false);
        continue;
      }
      mine.losses.push_back(st.loss_sum);
      mine.norms.push_back(w.clip().grad_norm());
      mine.scales.push_back(w.scaler().scale());
      mine.optimizer_steps.push_back(w.state().optimizer_steps());
      mine.skipped.push_back(w.scaler().skipped_total());
    }
    mine.last_waits = host_waits() - waits;
    read(true);
    mine.final_steps = w.state().optimizer_steps();
    replicas[size_t(r)] = w.state().download_weights();
    if (r == 0 && w.state().has_average()) mine.average = w.state().download_average();
    if (r == 0) out = std::move(mine);
  });
  out.weights = replicas[0];
  out.replicas = std::move(replicas);
  return out;
}
EngineRun train_engine(const RunSpec& e, Device device, bool fixed, const std::set<int>& poisoned, int lag = -1) {
  return train_engine(e, std::vector<Device>{device}, fixed, poisoned, lag);
}

// Every step's loss, norm, scale, step count and skip count, and the last weights, bit for bit.
void check_same(const EngineRun& a, const EngineRun& b) {
  for (size_t s = 0; s < a.losses.size(); ++s) {
    INFO("step " << s << ": loss " << a.losses[s] << " / " << b.losses[s] << ", norm " << a.norms[s] << " / "
                 << b.norms[s]);
    CHECK(same_double(a.losses[s], b.losses[s]));
    CHECK(same_double(a.norms[s], b.norms[s]));
    CHECK(a.scales[s] == b.scales[s]);
    if (!a.optimizer_steps.empty() && !b.optimizer_steps.empty()) CHECK(a.optimizer_steps[s] == b.optimizer_steps[s]);
    CHECK(a.skipped[s] == b.skipped[s]);
  }
  CHECK(a.losses.size() == b.losses.size());
  CHECK(a.final_steps == b.final_steps);
  REQUIRE(a.weights.size() == b.weights.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) differ += std::memcmp(&a.weights[i], &b.weights[i], sizeof(float)) != 0;
  INFO(differ << " of " << a.weights.size() << " weights differ");
  CHECK(differ == 0);
  REQUIRE(a.average.size() == b.average.size());
  if (!a.average.empty()) CHECK(std::memcmp(a.average.data(), b.average.data(), a.average.size() * sizeof(float)) == 0);
}

// Loss scaling (dynamic with a growth every 2 steps, a static scale that is not a power of two)
// with skipped steps, clipping by norm (both conventions) and by value, and the two together.
struct UpdateCase {
  const char* name;
  std::vector<std::string> sets;
  std::set<int> poisoned;  // only where loss scaling skips them
};
std::vector<UpdateCase> update_cases() {
  return {
      {"dynamic loss scale, sgd", {"train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {2, 3, 8}},
      {"clip_norm, adam (keras)", {"train.clip_norm=0.05", "optimizer={type: adam, lr: 0.01}"}, {}},
      {"clip_norm, sgd (pytorch)", {"train.clip_norm=0.05", "optimizer={type: sgd, lr: 0.05, momentum: 0.9, convention: pytorch}"}, {}},
      {"clip_value, static scale 1000, rmsprop", {"train.clip_value=0.002", "train.loss_scale=1000", "optimizer={type: rmsprop, lr: 0.01, momentum: 0.5}"}, {5}},
      {"clip_norm, dynamic scale, adamw", {"train.clip_norm=0.05", "train.loss_scale={init_scale: 4096, growth_interval: 3}", "optimizer={type: adamw, lr: 0.01}"}, {1, 6}},
      // Accumulation: the held sum kept by the earlier micro-batches' programs, added back by the last's.
      {"accumulate 2, sgd", {"train.accumulate=2", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {}},
      {"accumulate 3, dynamic scale, clip_norm, adam", {"train.accumulate=3", "train.clip_norm=0.05", "train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: adam, lr: 0.01}"}, {2, 7}},
      // The moving average inside the program: every second optimizer step, not on skipped ones.
      {"ema every 2, dynamic scale, sgd", {"train.ema={decay: 0.8, every: 2}", "train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {3, 4}},
  };
}

}  // namespace

TEST_CASE("fixed step: loss scaling and clipping decided by the step's own kernels give the ordinary step's bits (skips, both clip forms and conventions)",
          "[backends]") {
  for (const UpdateCase& c : update_cases()) {
    SECTION(c.name) {
      const RunSpec e = spec(c.sets);
      const EngineRun ordinary = train_engine(e, Device::cpu(0), false, c.poisoned);
      const EngineRun fixed = train_engine(e, Device::cpu(0), true, c.poisoned);
      const int k = e.train.accumulate;
      CHECK(ordinary.fixed == 0);
      CHECK(fixed.fixed == 10 * k);  // every micro-batch, the poisoned ones included, ran as the fixed program
      check_same(ordinary, fixed);
      // Read two steps late: the program carries the scale, its growth and the counts itself
      // (skips, growth and the moving average's cadence included), the host follows when it reads.
      check_same(ordinary, train_engine(e, Device::cpu(0), true, c.poisoned, 2));
      // Not trivial: the poisoned steps were skipped (and only they), clipping clipped.
      CHECK(fixed.skipped.back() == int64_t(c.poisoned.size()));
      CHECK(fixed.optimizer_steps.back() == 10 - int64_t(c.poisoned.size()));
      if (e.train.clip.mode == GradClipOptions::Mode::Norm)
        CHECK(*std::max_element(fixed.norms.begin(), fixed.norms.end()) > 0.05);
    }
  }
}

namespace {

// Every update case on `gpu` as CUDA graphs against devices.cuda_graphs: false, 10 steps each: the
// same bits; a replayed micro-batch waits for the device `waits` times.
void check_graphs_against_launched(const test::TestDevice& gpu, int waits) {
  for (const UpdateCase& c : update_cases()) {
    INFO(c.name);
    std::vector<std::string> sets = c.sets;
    sets.push_back("devices.tf32=false");
    const RunSpec graphs = spec(sets);
    sets.push_back("devices.cuda_graphs=false");
    const RunSpec launched = spec(sets);
    const EngineRun on = train_engine(graphs, gpu.device, false, c.poisoned);
    const EngineRun off = train_engine(launched, gpu.device, false, c.poisoned);
    const int k = graphs.train.accumulate;
    CHECK(on.fixed == 10 * k);
    CHECK(off.fixed == 0);
    // Steps 0 and 4 of each batch size plan, 1 and 5 record, the rest replay (each micro-batch
    // kind of an accumulated step its own recording).
    CHECK(on.recorded == 6 * k);
    CHECK(on.last_waits == uint64_t(3 * k * waits));
    CHECK(off.last_waits > on.last_waits);
    check_same(off, on);
    CHECK(on.skipped.back() == int64_t(c.poisoned.size()));
  }
}

}  // namespace

TEST_CASE("fixed step: loss scaling and clipping as CUDA graphs give the ordinary step's bits") {
  const test::TestDevice* gpu = test::test_gpu();  // a skip, with the reason, where no GPU can run
  if (!gpu) return;
  // A replayed micro-batch waits for the device once: its loss sums and check, read back together
  // (its batch, labels and scalars go through staging buffers of their own).
  check_graphs_against_launched(*gpu, 1);
}

TEST_CASE("fixed step: several replicas with the all-reduce and buffer broadcast inside the program give the ordinary step's bits",
          "[backends]") {
  // 2 and 3 CPU replicas (the in-process communicator summing in rank order both ways): loss
  // scaling with skips, clipping, accumulation, batch-norm statistics broadcast from rank 0.
  for (const int ranks : {2, 3})
    for (const UpdateCase& c : update_cases()) {
      if (ranks == 3 && c.name != std::string("accumulate 3, dynamic scale, clip_norm, adam")) continue;
      SECTION(std::to_string(ranks) + " replicas, " + c.name) {
        const RunSpec e = spec(c.sets);
        std::vector<Device> devices;
        for (int r = 0; r < ranks; ++r) devices.push_back(Device::cpu(r));
        const EngineRun ordinary = train_engine(e, devices, false, c.poisoned);
        const EngineRun fixed = train_engine(e, devices, true, c.poisoned);
        const int k = e.train.accumulate;
        CHECK(ordinary.fixed == 0);
        CHECK(fixed.fixed == 10 * k);
        check_same(ordinary, fixed);
        // Every replica holds rank 0's weights, bit for bit, on both paths.
        for (int r = 1; r < ranks; ++r) {
          INFO("rank " << r);
          CHECK(std::memcmp(fixed.replicas[size_t(r)].data(), fixed.replicas[0].data(), fixed.replicas[0].size() * sizeof(float)) == 0);
          CHECK(std::memcmp(ordinary.replicas[size_t(r)].data(), ordinary.replicas[0].data(),
                            ordinary.replicas[0].size() * sizeof(float)) == 0);
        }
        CHECK(fixed.skipped.back() == int64_t(c.poisoned.size()));
        // The statistics are the job's: every rank's samples counted.
        CHECK(fixed.losses.front() != 0);
      }
    }
}

TEST_CASE("fixed step: a one-rank NCCL step records its all-reduce and broadcast in the CUDA graph, one GPU listed twice stays launched") {
  const test::TestDevice* gpu = test::test_gpu();  // a skip, with the reason, where no GPU can run
  if (!gpu) return;
  ScopedEnv comm("TRAINER_COMM", "nccl");  // NCCL for one GPU: the collectives issued inside the capture
  // A replayed micro-batch waits twice: for its collectives (abortably) and for its results.
  check_graphs_against_launched(*gpu, 2);
  // The in-process communicator meets the other replica on the host: no program, as launched.
  comm.set(nullptr);
  const RunSpec e = spec({"devices.tf32=false", "optimizer={type: adam, lr: 0.01}"});
  const EngineRun twice = train_engine(e, {gpu->device, gpu->device}, false, {});
  CHECK(twice.fixed == 0);
}

TEST_CASE("fixed step: evaluation as a program gives eval_step's bits (batch sizes, both losses, a bad label)", "[backends]") {
  for (const test::TestDevice& d : test::test_devices())
    for (const bool binary : {false, true}) {
      SECTION(d.name + (binary ? " binary_crossentropy" : " cross_entropy")) {
        const RunSpec e = binary ? spec({"model.layers.6.units=1", "model.layers.7.type=sigmoid",
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

TEST_CASE("fixed step: TRAINER_CUDA_GRAPHS=0 launches every step (the reference), 1 records, anything else is refused") {
  ScopedEnv graphs("TRAINER_CUDA_GRAPHS", nullptr);
  CHECK(trainee_spec(spec({})).cuda_graphs);
  CHECK_FALSE(trainee_spec(spec({"devices.cuda_graphs=false"})).cuda_graphs);
  graphs.set("0");
  CHECK_FALSE(trainee_spec(spec({})).cuda_graphs);
  // With it, the fixed program is not used even where it could run (the CPU, allowed anywhere).
  const EngineRun launched = train_engine(spec({}), Device::cpu(0), true, {});
  CHECK(launched.fixed == 0);
  graphs.set("1");
  CHECK(trainee_spec(spec({"devices.cuda_graphs=false"})).cuda_graphs);
  CHECK(train_engine(spec({}), Device::cpu(0), true, {}).fixed == 10);
  graphs.set("off");
  CHECK_THROWS_AS(trainee_spec(spec({})), cfg::ConfigError);
}
