// Device-parallel invariants on virtual CPU devices: a model cut over devices trains exactly as
// on one device; GPipe micro-batches (M = 1, 2, 4) match one pass over the batch for BN-free
// nets; a shared layer's gradient is the sum of its uses' (on one device and across devices).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "../cpu_bf16.h"
#include "core/run/plan.h"
#include "core/runtime/device_parallel/pipeline_copy.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/runtime/strategy.h"
#include "skip.h"

using namespace trainer;

namespace {

const char* kCnn = R"(
name: dp_cnn
seed: 5
model:
  input: [8, 8, 3]
  layers:
    - {name: conv1, type: conv2d, filters: 6, kernel: 3, padding: same}
    - {name: relu1, type: relu}
    - {name: pool, type: max_pool2d, pool: 2}
    - {name: conv2, type: conv2d, filters: 8, kernel: 3, strides: 2, padding: same}
    - {name: relu2, type: relu}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
strategy: device_parallel
placement: {conv1: cpu:0, conv2: cpu:1}
)";

// Two sequences through one shared LSTM on two devices, merged on a third (the Keras FAQ model).
const char* kSharedLstm = R"(
name: shared
seed: 3
model:
  inputs:
    - {name: a, shape: [5, 4]}
    - {name: b, shape: [5, 4]}
  layers:
    - {name: lstm_a, type: lstm, units: 6, inputs: [a]}
    - {name: lstm_b, share: lstm_a, inputs: [b]}
    - {name: merged, type: concat, inputs: [lstm_a, lstm_b]}
    - {name: hidden, type: dense, units: 8}
    - {name: relu, type: relu}
    - {name: out, type: dense, units: 1}
    - {name: sigmoid, type: sigmoid}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 2}
train: {loss: binary_crossentropy}
optimizer: {type: rmsprop, lr: 0.01}
strategy: device_parallel
placement: {lstm_a: cpu:1, lstm_b: cpu:2, merged: cpu}
)";

RunSpec experiment(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return read_run_spec(cfg::parse_document(yaml, "dp.yaml", sets));
}

std::vector<Device> cpus(const RunSpec& e) {
  std::vector<Device> d;
  for (size_t i = 0; i < e.placement.devices.size(); ++i) d.push_back(Device::cpu(int(i)));
  return d;
}

// A batch of n samples for a model with these inputs: values in [-1, 1), labels in [0, classes).
Batch random_batch(const std::vector<Shape>& shapes, int64_t n, int classes, uint32_t seed) {
  int64_t total = 0;
  for (const Shape& s : shapes) total += s.numel();
  Batch b;
  b.images = Tensor::empty(Shape{n, total});
  b.labels = Tensor::empty(Shape{n}, DType::I32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n * total; ++i) b.images.f32()[i] = u(rng);
  for (int64_t i = 0; i < n; ++i) b.labels.i32()[i] = int32_t(rng() % uint32_t(classes));
  b.size = b.global_size = n;
  if (shapes.size() == 1) b.images = b.images.reshape(shapes[0].with_batch(n));
  return b;
}

// Every parameter's values by name.
std::map<std::string, std::vector<float>> by_name(ModelState& s) {
  std::vector<float> w = s.download_weights();
  std::map<std::string, std::vector<float>> out;
  for (const ParamEntry& p : s.entries()) out[p.name].assign(w.begin() + p.offset, w.begin() + p.offset + p.spec.shape.numel());
  return out;
}

double max_diff(const std::map<std::string, std::vector<float>>& a, const std::map<std::string, std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (const auto& [name, v] : a) {
    REQUIRE(b.count(name));
    const std::vector<float>& w = b.at(name);
    REQUIRE(v.size() == w.size());
    for (size_t i = 0; i < v.size(); ++i) d = std::max(d, double(std::fabs(v[i] - w[i])));
  }
  return d;
}

std::vector<Shape> input_shapes(const RunSpec& e) {
  std::vector<Shape> s;
  for (const ModelInput& in : e.model.inputs) s.push_back(in.shape);
  return s;
}

// Final weights after `steps` steps on one device.
std::map<std::string, std::vector<float>> train_single(const RunSpec& e, int steps, int classes) {
  Replica r(trainee_spec(e), Device::cpu(0), 1);
  for (int s = 0; s < steps; ++s) {
    Batch b = random_batch(input_shapes(e), 12, classes, uint32_t(100 + s));
    r.train_step(b.images, b.labels, 0.05f, uint64_t(s));
  }
  return by_name(r.state());
}

// `norms`, when given, receives each step's gradient norm (clipping on); step `poison` gets an
// inf gradient (loss scaling's test hook).
// Rows [lo, hi) of `all` as a batch of a step whose micro-batches hold `global` samples over every copy.
Batch rows(const Batch& all, int64_t lo, int64_t hi, int64_t global) {
  Batch b;
  b.images = all.images.slice(lo, hi);
  b.labels = all.labels.slice(lo, hi);
  b.size = hi - lo;
  b.global_size = global;
  return b;
}

// `accumulate` k: each step's batch of 12 is k micro-batches of 12/k (train.accumulate k) and
// the inf (`poison`) goes into the step's first.
std::map<std::string, std::vector<float>> train_placed(RunSpec e, int steps, int classes,
                                                       std::vector<double>* norms = nullptr, int poison = -1,
                                                       int accumulate = 1) {
  e.train.accumulate = accumulate;
  PipelineCopy w(trainee_spec(e), cpus(e), 1);
  bool stop = false;
  for (int s = 0; s < steps; ++s) {
    if (s == poison) w.inject_nonfinite();
    Batch all = random_batch(input_shapes(e), 12, classes, uint32_t(100 + s));
    for (int i = 0; i < accumulate; ++i) {
      const int64_t lo = 12 * i / accumulate, hi = 12 * (i + 1) / accumulate;
      w.train_step(rows(all, lo, hi, hi - lo), 0.05f, uint64_t(s * accumulate + i), stop,
                   MicroStep{i, accumulate, accumulate > 1 ? 12 : 0});
    }
    if (norms) norms->push_back(w.clip().grad_norm());
  }
  return by_name(w.state());
}

// The same on one device through the data-parallel worker (one replica), whose step clips.
std::map<std::string, std::vector<float>> train_worker(const RunSpec& e, int steps, int classes,
                                                       std::vector<double>* norms = nullptr) {
  ReplicaGroup group(trainee_spec(e), {Device::cpu(0)}, 1);
  group.run([&](ReplicaCopy& w) {
    bool stop = false;
    for (int s = 0; s < steps; ++s) {
      Batch b = random_batch(input_shapes(e), 12, classes, uint32_t(100 + s));
      w.train_step(b, 0.05f, uint64_t(s), stop);
      if (norms) norms->push_back(w.clip().grad_norm());
    }
  });
  return by_name(group.worker(0).state());
}

}  // namespace

TEST_CASE("device parallel: a CNN over two devices trains as on one (10 steps, 1e-5)", "[device_parallel]") {
  RunSpec e = experiment(kCnn);
  REQUIRE(e.placement.devices == std::vector<std::string>{"cpu:0", "cpu:1"});
  auto one = train_single(e, 10, 5), two = train_placed(e, 10, 5);
  double d = max_diff(one, two);
  WARN("CNN on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("device parallel: clip_norm (one norm over every stage's gradients) and clip_value train as on one device",
          "[device_parallel]") {
  for (const char* clip : {"train.clip_norm=0.05", "train.clip_value=0.002"}) {
    INFO(clip);
    RunSpec e = experiment(kCnn, {clip});
    std::vector<double> n1, n2;
    auto one = train_worker(e, 10, 5, &n1), two = train_placed(e, 10, 5, &n2);
    double d = max_diff(one, two);
    WARN("CNN on 2 virtual CPU devices vs 1 device after 10 SGD steps with " << clip << ": max |dw| = " << d);
    CHECK(d <= 1e-5);
    REQUIRE(n1.size() == n2.size());
    for (size_t s = 0; s < n1.size(); ++s) {
      CHECK(n1[s] > 0.05);  // in force at every step
      CHECK(std::abs(n1[s] - n2[s]) <= 1e-5 * n1[s]);
    }
    CHECK(max_diff(two, train_placed(experiment(kCnn), 10, 5)) > 1e-3);  // and it changes the result
  }
  RunSpec lstm = experiment(kSharedLstm, {"train.clip_norm=0.01"});
  double d = max_diff(train_worker(lstm, 10, 2), train_placed(lstm, 10, 2));
  WARN("shared LSTM on 3 virtual CPU devices vs 1 device after 10 RMSprop steps with clip_norm 0.01: max |dw| = " << d);
  CHECK(d <= 1e-5);
}

// R copies of the placed pipeline (strategy hybrid) on R x S virtual CPU devices, copy r taking rows
// [r*12/R, (r+1)*12/R) of each batch of 12; returns copy 0's weights, checking that every copy's
// equal it bitwise after every step.
// `accumulate` k: each copy's rows are k micro-batches (train.accumulate k).
std::map<std::string, std::vector<float>> train_hybrid(RunSpec e, int copies, int steps, int classes, bool* identical,
                                                       int poison = -1, int accumulate = 1) {
  e.strategy = StrategyKind::Hybrid;
  e.train.accumulate = accumulate;
  std::vector<Device> devices;
  for (size_t d = 0; d < size_t(copies) * e.placement.devices.size(); ++d) devices.push_back(Device::cpu(int(d)));
  std::unique_ptr<Strategy> s = strategy_type(StrategyKind::Hybrid).make(trainee_spec(e), devices, 1);
  REQUIRE(s->size() == copies);
  std::vector<std::vector<float>> w(static_cast<size_t>(copies));
  *identical = true;
  s->run([&](Trainee& t) {
    t.broadcast_parameters();
    bool stop = false;
    for (int step = 0; step < steps; ++step) {
      if (step == poison) t.inject_nonfinite();  // every copy is told; copy 0 puts the inf in, before the sum
      Batch all = random_batch(input_shapes(e), 12, classes, uint32_t(100 + step));
      const int64_t lo = 12 * t.rank() / copies, hi = 12 * (t.rank() + 1) / copies, n = hi - lo;
      for (int i = 0; i < accumulate; ++i)
        t.train_step(rows(all, lo + n * i / accumulate, lo + n * (i + 1) / accumulate, 12 / accumulate), 0.05f,
                     uint64_t(step * accumulate + i), stop, MicroStep{i, accumulate, accumulate > 1 ? 12 : 0});
      w[size_t(t.rank())] = t.state().download_weights();
    }
  });
  for (int r = 1; r < copies; ++r) *identical = *identical && w[size_t(r)] == w[0];
  return by_name(s->trainee(0).state());
}

TEST_CASE("hybrid: R copies of a pipeline train as one copy with the whole batch and as one device (10 steps, 1e-5)",
          "[device_parallel]") {
  for (const char* yaml : {kCnn, kSharedLstm}) {
    const bool lstm = yaml == kSharedLstm;
    for (int copies : {2, 3}) {
      for (int M : {1, 2}) {
        RunSpec e = experiment(yaml, {"pipeline.microbatches=" + std::to_string(M)});
        bool same = false;
        auto hybrid = train_hybrid(e, copies, 10, lstm ? 2 : 5, &same);
        auto one_copy = train_placed(e, 10, lstm ? 2 : 5);
        auto single = train_single(e, 10, lstm ? 2 : 5);
        const double d_copy = max_diff(hybrid, one_copy), d_single = max_diff(hybrid, single);
        WARN((lstm ? "shared LSTM" : "CNN") << ": hybrid " << copies << " copies x " << e.placement.devices.size()
             << " stages, M = " << M << ", vs one pipeline with the whole batch: max |dw| = " << d_copy
             << "; vs one device: " << d_single);
        CHECK(same);
        CHECK(d_copy <= 1e-5);
        CHECK(d_single <= 1e-5);
      }
    }
  }
}

TEST_CASE("hybrid with loss scaling: an inf on copy 0 reaches every copy through the sum, and all skip the step", "[device_parallel]") {
  RunSpec e = experiment(kCnn, {"train.loss_scale=dynamic", "pipeline.microbatches=2"});
  bool same = false;
  auto hybrid = train_hybrid(e, 2, 10, 5, &same, 3);
  auto one_copy = train_placed(e, 10, 5, nullptr, 3);
  const double d = max_diff(hybrid, one_copy);
  WARN("CNN, hybrid 2 x 2 with dynamic loss scaling and an inf at step 3 vs one pipeline: max |dw| = " << d);
  CHECK(same);
  CHECK(d <= 1e-5);
  CHECK(max_diff(one_copy, train_placed(e, 10, 5)) > 1e-4);  // the skipped step shows
}

TEST_CASE("hybrid with sync_bn: batch norm over the copies trains as one copy with the whole batch (M = 1)", "[device_parallel]") {
  // conv1 -> batch norm on stage 1; without sync each copy would normalise by its own half batch.
  const std::string bn = std::string(kCnn).replace(std::string(kCnn).find("    - {name: relu1"), 0,
                                                   "    - {name: bn, type: batchnorm}\n");
  RunSpec synced = experiment(bn, {"train.sync_bn=true"});
  bool same = false;
  auto hybrid = train_hybrid(synced, 2, 10, 5, &same);
  auto one_copy = train_placed(experiment(bn), 10, 5);
  const double d = max_diff(hybrid, one_copy);
  bool same_local = false;
  const double local = max_diff(train_hybrid(experiment(bn), 2, 10, 5, &same_local), one_copy);
  WARN("CNN with batch norm, hybrid 2 copies x 2 stages with sync_bn vs one pipeline with the whole batch: max |dw| = "
       << d << " (without sync_bn: " << local << ")");
  CHECK(same);
  CHECK(d <= 1e-5);
  CHECK(local > 1e-4);  // the control: per-copy statistics differ
}

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

TEST_CASE("device parallel in bf16: the boundary stays f32 and the CNN trains as on one device", "[device_parallel]") {
  // On one device the pool's output is bf16; placed, it is the boundary and stays f32 (keep_f32),
  // and conv2 on the other device converts it to bf16 as it reads it: the same values, since the
  // maximum of bf16 values is one of them. Gradients cross back as f32 and are converted where the
  // single graph would have stored bf16. So the two agree as closely as in fp32, while bf16 itself
  // moves the weights far more than that from fp32's.
  if (!test::cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, test::cpu_bf16_skip_message());
  RunSpec e = experiment(kCnn, {"precision=bf16"});
  REQUIRE(e.precision == Precision::BF16);
  auto one = train_single(e, 10, 5), two = train_placed(e, 10, 5);
  double d = max_diff(one, two), from_fp32 = max_diff(one, train_single(experiment(kCnn), 10, 5));
  WARN("bf16 CNN on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d << " (bf16 vs fp32 on one device: "
       << from_fp32 << ")");
  CHECK(d <= 1e-5);
  CHECK(from_fp32 > 1e-4);
}

TEST_CASE("device parallel: GPipe micro-batches M = 2, 4 match M = 1 (10 steps, 1e-5)", "[device_parallel]") {
  auto base = train_placed(experiment(kCnn), 10, 5);
  for (int m : {2, 4}) {
    RunSpec e = experiment(kCnn, {"pipeline.microbatches=" + std::to_string(m)});
    REQUIRE(e.microbatches == m);
    double d = max_diff(base, train_placed(e, 10, 5));
    WARN("CNN, " << m << " micro-batches vs 1 after 10 SGD steps: max |dw| = " << d);
    CHECK(d <= 1e-5);
  }
}

TEST_CASE("device parallel: the shared-LSTM model over three devices trains as on one", "[device_parallel]") {
  RunSpec e = experiment(kSharedLstm);
  REQUIRE(e.placement.devices.size() == 3);
  auto one = train_single(e, 10, 2);
  REQUIRE(one.count("lstm_a/kernel"));
  REQUIRE_FALSE(one.count("lstm_b/kernel"));  // one parameter set for both uses
  for (int m : {1, 3}) {
    RunSpec p = experiment(kSharedLstm, {"pipeline.microbatches=" + std::to_string(m)});
    double d = max_diff(one, train_placed(p, 10, 2));
    WARN("shared LSTM on 3 virtual CPU devices (" << m << " micro-batches) vs 1 device after 10 RMSprop steps: max |dw| = " << d);
    CHECK(d <= 1e-5);
  }
}

TEST_CASE("shared layers: the gradient is the sum of both uses' gradients", "[device_parallel]") {
  // The same model without sharing: lstm_b has its own parameters, set equal to lstm_a's.
  std::string unshared = kSharedLstm;
  unshared.replace(unshared.find("{name: lstm_b, share: lstm_a, inputs: [b]}"), 42,
                   "{name: lstm_b, type: lstm, units: 6, inputs: [b]}");
  RunSpec shared = experiment(kSharedLstm), separate = experiment(unshared);
  Batch b = random_batch(input_shapes(shared), 7, 2, 42);

  Replica rs(trainee_spec(shared), Device::cpu(0), 1), ru(trainee_spec(separate), Device::cpu(0), 1);
  {  // separate's lstm_b := lstm_a, everything else equal by name (same seed)
    std::vector<float> w = ru.state().download_weights();
    auto src = by_name(rs.state());
    for (const ParamEntry& p : ru.state().entries()) {
      std::string from = p.name.rfind("lstm_b/", 0) == 0 ? "lstm_a/" + p.name.substr(7) : p.name;
      std::copy(src.at(from).begin(), src.at(from).end(), w.begin() + p.offset);
    }
    ru.state().upload_weights(w);
  }
  auto grads = [](Replica& r) {
    std::vector<float> g(size_t(r.executor().params().trainable_floats()));
    r.context().copy_to_host(g.data(), r.executor().params().grads().data(), g.size() * sizeof(float));
    std::map<std::string, std::vector<float>> out;
    for (const ParamEntry& p : r.executor().params().entries())
      if (p.spec.trainable) out[p.name].assign(g.begin() + p.offset, g.begin() + p.offset + p.spec.shape.numel());
    return out;
  };
  rs.compute_gradients(b.images, b.labels, 1.0f / 7, 0);
  ru.compute_gradients(b.images, b.labels, 1.0f / 7, 0);
  auto gs = grads(rs), gu = grads(ru);
  double worst = 0, scale = 0;
  for (const char* p : {"kernel", "recurrent_kernel", "bias"}) {
    const auto &sum = gs.at(std::string("lstm_a/") + p), &a = gu.at(std::string("lstm_a/") + p), &bb = gu.at(std::string("lstm_b/") + p);
    for (size_t i = 0; i < sum.size(); ++i) {
      worst = std::max(worst, double(std::fabs(sum[i] - (a[i] + bb[i]))));
      scale = std::max(scale, double(std::fabs(a[i])) + std::fabs(bb[i]));
    }
  }
  WARN("shared LSTM gradient vs the sum of two separate LSTMs' (one device): max diff " << worst << " (gradients up to " << scale << ")");
  CHECK(scale > 1e-4);
  CHECK(worst <= 1e-6);

  // Across devices: each copy holds the sum after a step's gradients.
  PipelineCopy w(trainee_spec(shared), cpus(shared), 1);
  w.compute_gradients(b, 0);
  for (int s = 0; s < w.stages(); ++s) {
    ParamStore& ps = w.stage(s).params();
    for (const ParamEntry& p : ps.entries()) {
      if (p.name.rfind("lstm_a/", 0) != 0 || !p.spec.trainable) continue;
      std::vector<float> g(size_t(p.spec.shape.numel()));
      Tensor gv = ps.grad_view(size_t(&p - &ps.entries()[0]));
      w.stage(s).context().copy_to_host(g.data(), gv.data(), gv.bytes());
      const auto& sum = gs.at(p.name);
      double d = 0;
      for (size_t i = 0; i < g.size(); ++i) d = std::max(d, double(std::fabs(g[i] - sum[i])));
      INFO("stage " << s << " " << p.name);
      CHECK(d <= 1e-6);
    }
  }
}

TEST_CASE("device parallel: config errors name the place", "[device_parallel]") {
  auto fails = [](const std::vector<std::string>& sets, const std::string& want) {
    try {
      experiment(kCnn, sets);
      FAIL("no error for " << want);
    } catch (const cfg::ConfigError& x) {
      CHECK_THAT(std::string(x.what()), Catch::Contains(want));
    }
  };
  fails({"placement={conv3: cpu:1}"}, "placement names 'conv3', which is not a layer or block of the model (did you mean 'conv1'");
  fails({"placement={conv1: tpu:0}"}, "'tpu:0' is not a device: use cpu, cpu:N (a virtual CPU device) or gpu:N");
  fails({"strategy=data_parallel"}, "'placement' needs strategy: device_parallel or hybrid");
  fails({"pipeline.microbatches=0"}, "microbatches");
}

TEST_CASE("stage threads: a failing stage stops the waiting ones and its error reaches the caller", "[device_parallel]") {
  Mailbox box;
  StageThreads threads(3, [](int) {}, box);
  box.reset(4);
  auto t0 = std::chrono::steady_clock::now();
  try {
    threads.run_all([&](int s) {
      if (s == 1) throw std::runtime_error("stage one broke");
      box.wait(size_t(s));  // never posted: only the abort wakes these
    });
    FAIL("no exception");
  } catch (const PipelineAborted&) {
    FAIL("the abort of the waiting stages hid the first failure");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "stage one broke");
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  // The threads are usable again afterwards.
  box.reset(3);
  std::atomic<int> ran{0};
  threads.run_all([&](int s) {
    box.post(size_t(s));
    box.wait(size_t((s + 1) % 3));
    ++ran;
  });
  CHECK(ran == 3);
}

TEST_CASE("shared layers under data parallelism: 2 replicas x 6 match 1 replica x 12 (gradient buckets wait for the owner)",
          "[device_parallel]") {
  // Buckets are all-reduced as backward finishes them: a shared layer's gradient is final only
  // after its first use's backward has added the second use's, which the bucket must wait for.
  RunSpec e = experiment(kSharedLstm, {"strategy=data_parallel", "placement=null", "train.bucket_mb=0.001"});
  auto one = train_single(e, 10, 2);
  e.train.batch_size = 6;
  ReplicaGroup group(trainee_spec(e), {Device::cpu(0), Device::cpu(1)}, 1);
  std::vector<std::vector<float>> finals(2);
  group.run([&](ReplicaCopy& w) {
    w.broadcast_parameters();
    bool stop = false;
    for (int s = 0; s < 10; ++s) {
      Batch all = random_batch(input_shapes(e), 12, 2, uint32_t(100 + s)), mine;
      mine.images = all.images.slice(6 * w.rank(), 6 * w.rank() + 6);
      mine.labels = all.labels.slice(6 * w.rank(), 6 * w.rank() + 6);
      mine.size = 6;
      mine.global_size = 12;
      w.train_step(mine, 0.05f, uint64_t(s), stop);
    }
    finals[size_t(w.rank())] = w.state().download_weights();
  });
  CHECK(finals[0] == finals[1]);
  std::map<std::string, std::vector<float>> two;
  for (const ParamEntry& p : group.worker(0).state().entries())
    two[p.name].assign(finals[0].begin() + p.offset, finals[0].begin() + p.offset + p.spec.shape.numel());
  double d = max_diff(one, two);
  WARN("shared LSTM, 2 data-parallel replicas vs 1 after 10 RMSprop steps: max |dw| = " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("device parallel: CPU stages leave one core per GPU stage's thread, --threads is taken as given", "[device_parallel]") {
  const StrategyType& t = strategy_type(StrategyKind::DeviceParallel);
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  DevicesSpec d;
  CHECK(t.threads(d, {Device::cpu(0)}) == hw);
  CHECK(t.threads(d, {Device::cpu(0), Device::cpu(1)}) == std::max(1, hw / 2));
  CHECK(t.threads(d, {Device::cuda(0), Device::cpu(0)}) == std::max(1, hw - 1));
  CHECK(t.threads(d, {Device::cuda(0), Device::cuda(1), Device::cpu(0)}) == std::max(1, hw - 2));
  CHECK(t.threads(d, {Device::cuda(0), Device::cuda(1)}) == hw);  // no CPU stage: nothing to share
  d.threads = 3;
  CHECK(t.threads(d, {Device::cuda(0), Device::cpu(0)}) == 3);
}
