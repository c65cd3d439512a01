// Loss scaling: the scaler's GradScaler arithmetic (and the fixed step's StepState, the same on the device), train.loss_scale's forms, all_finite on every backend, and the engine's skipped steps (data and device parallel), static-scale and replica equivalence.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "core/run/plan.h"
#include "core/runtime/device_parallel/pipeline_copy.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/ops/math/step_state_math.h"
#include "core/ops/optim_update.h"
#include "core/runtime/step_update.h"
#include "test_devices.h"

using namespace trainer;

namespace {

const char* kCnn = R"(
name: ls
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
train: {batch_size: 12, bucket_mb: 0.001}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
)";

RunSpec experiment(const std::vector<std::string>& sets) {
  return read_run_spec(cfg::parse_document(kCnn, "ls.yaml", sets));
}

// A global batch of 12 random samples (the same for every seed on every call).
Batch random_batch(uint32_t seed) {
  const int64_t n = 12;
  Batch b;
  b.images = Tensor::empty(Shape{n, 8, 8, 3});
  b.labels = Tensor::empty(Shape{n}, DType::I32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.f32()[i] = u(rng);
  for (int64_t i = 0; i < n; ++i) b.labels.i32()[i] = int32_t(rng() % 5u);
  b.size = b.global_size = n;
  return b;
}

// What a trainee holds after one step (rank 0's, or the whole pipeline's).
struct Snapshot {
  std::vector<float> weights, momentum;
  std::map<std::string, std::vector<float>> named;  // the weights by parameter name
  int64_t optimizer_steps = 0;
  float scale = 0;
  int64_t skipped = 0;
};

Snapshot snapshot(Trainee& t) {
  Snapshot s;
  s.weights = t.state().download_weights();
  for (const ParamEntry& p : t.state().entries())
    s.named[p.name].assign(s.weights.begin() + p.offset, s.weights.begin() + p.offset + p.spec.shape.numel());
  s.momentum = t.state().download_state("momentum");
  s.optimizer_steps = t.state().optimizer_steps();
  s.scale = t.scaler().scale();
  s.skipped = t.scaler().skipped_total();
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

// `steps` data-parallel steps on `replicas` CPU replicas (each rank gets its slice of the global
// batch of 12), an inf injected at the steps in `poison`; rank 0's snapshot after every step.
// Checks that every rank holds the same scale and weights after every step.
std::vector<Snapshot> train_dp(const RunSpec& e0, int replicas, int steps, const std::set<int>& poison = {}) {
  RunSpec e = e0;
  e.train.batch_size = 12 / replicas;
  std::vector<Device> devices;
  for (int r = 0; r < replicas; ++r) devices.push_back(Device::cpu(r));
  ReplicaGroup group(trainee_spec(e), devices, 1);
  std::vector<Snapshot> out;
  std::vector<Snapshot> last(static_cast<size_t>(replicas));
  bool agree = true;
  group.run([&](ReplicaCopy& w) {
    w.broadcast_parameters();
    bool stop = false;
    for (int s = 0; s < steps; ++s) {
      Batch g = random_batch(uint32_t(100 + s));
      const int64_t per = 12 / replicas, lo = per * w.rank();
      Batch b;
      b.images = g.images.slice(lo, lo + per);
      b.labels = g.labels.slice(lo, lo + per);
      b.size = per;
      b.global_size = 12;
      if (poison.count(s)) w.inject_nonfinite();
      w.train_step(b, 0.05f, uint64_t(s), stop);
      last[size_t(w.rank())] = snapshot(w);
      w.control().barrier();
      if (w.rank() == 0) {
        for (int r = 1; r < replicas; ++r)
          agree = agree && same_bits(last[0].weights, last[size_t(r)].weights) && last[0].scale == last[size_t(r)].scale &&
                  last[0].skipped == last[size_t(r)].skipped;
        out.push_back(last[0]);
      }
      w.control().barrier();
    }
  });
  CHECK(agree);
  return out;
}

std::vector<Snapshot> train_pipeline(const RunSpec& e, int steps, const std::set<int>& poison) {
  std::vector<Device> devices;
  for (size_t i = 0; i < e.placement.devices.size(); ++i) devices.push_back(Device::cpu(int(i)));
  PipelineCopy w(trainee_spec(e), devices, 1);
  std::vector<Snapshot> out;
  bool stop = false;
  for (int s = 0; s < steps; ++s) {
    if (poison.count(s)) w.inject_nonfinite();
    w.train_step(random_batch(uint32_t(100 + s)), 0.05f, uint64_t(s), stop);
    out.push_back(snapshot(w));
  }
  return out;
}

LossScaleOptions options_of(const std::string& text, Precision p = Precision::FP32) {
  auto doc = cfg::parse_document("loss_scale: " + text + "\n", "t.yaml");
  return read_loss_scale(cfg::root(doc).child("loss_scale"), p);
}

}  // namespace

TEST_CASE("loss scaler: backs off and skips on inf/NaN, grows after growth_interval finite steps (GradScaler)", "[loss_scale]") {
  LossScaleOptions o = options_of("{init_scale: 1024, growth_interval: 3}");
  REQUIRE(o.mode == LossScaleOptions::Mode::Dynamic);
  LossScaler s(o);
  CHECK(s.scale() == 1024.0f);
  s.update(true);
  s.update(true);
  CHECK(s.scale() == 1024.0f);
  s.update(false);  // backoff, and the run of finite steps starts again
  CHECK(s.scale() == 512.0f);
  CHECK(s.skipped_total() == 1);
  s.update(true);
  s.update(true);
  CHECK(s.scale() == 512.0f);
  s.update(true);
  CHECK(s.scale() == 1024.0f);
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 256.0f);
  CHECK(s.skipped_total() == 3);
  CHECK(s.skipped_in_epoch() == 3);
  s.begin_epoch();
  CHECK(s.skipped_in_epoch() == 0);
  CHECK(s.skipped_total() == 3);

  SECTION("the state goes through a checkpoint and back") {
    s.update(true);
    LossScaler r(o);
    r.restore(s.state());
    CHECK(r.scale() == s.scale());
    CHECK(r.skipped_total() == 3);
    r.update(true);
    r.update(true);  // the run of finite steps was restored too: 3 in all
    CHECK(r.scale() == 512.0f);
  }
  SECTION("growth stops before a float overflow") {
    LossScaler big(options_of("{init_scale: 1.0e38, growth_factor: 4, growth_interval: 1}"));
    big.update(true);
    CHECK(big.scale() == 1.0e38f);
  }
}

// LossScaler::update is step_state_math::end on the host (one arithmetic), so this checks what the
// device adds: begin's factors, corrections and cadence, and the update count across skips.
TEST_CASE("step state: begin derives the host's factors, end counts updates and moves the scale as LossScaler does",
          "[loss_scale]") {
  LossScaleOptions dynamic;
  dynamic.mode = LossScaleOptions::Mode::Dynamic;
  dynamic.init_scale = std::ldexp(1.0, 120);  // grows past float's range: the product is not kept
  dynamic.growth_interval = 3;
  LossScaleOptions fixed;
  fixed.mode = LossScaleOptions::Mode::Static;
  fixed.init_scale = 1000;
  for (const LossScaleOptions& o : {dynamic, fixed, LossScaleOptions{}}) {
    INFO(o.describe());
    const StepUpdate update(o, GradClipOptions{});
    const StateRule rule = update.state_rule();
    LossScaler host(o);
    StepState state;
    state.scale = host.scale();
    int64_t count = 0;
    float largest = 0;
    for (int s = 0; s < 400; ++s) {
      StepScalars step;
      step.inv_scored = 1.0f / 48.0f;
      step.average_every = 3;
      for (int64_t t = std::max<int64_t>(1, count + 2 - StepScalars::kBiasRing); t <= count + 1; ++t)
        step.bias_ring[t % StepScalars::kBiasRing][0] = float(t), step.bias_ring[t % StepScalars::kBiasRing][1] = -float(t);
      step_state_math::begin(state, rule, &step);
      CHECK(step.loss_scale == (1.0f / 48.0f) * host.scale());  // Trainee::step's factor
      CHECK(step.unscale == 1.0f / host.scale());
      CHECK(step.grad_scale == step.unscale);
      CHECK(step.bias1 == float(count + 1));  // the corrections of the count the update takes it to
      CHECK(step.bias2 == -float(count + 1));
      CHECK(step.average == ((count + 1) % 3 == 0 ? 1u : 0u));
      step.skip = o.enabled() && s % 11 == 10 ? 1u : 0u;  // what decide_step found
      step_state_math::end(&state, rule, step);
      host.update(!step.skip);
      count += step.skip ? 0 : 1;
      REQUIRE(state.scale == host.scale());
      REQUIRE(state.good_steps == host.good_steps());
      REQUIRE(state.updates == count);
      largest = std::max(largest, state.scale);
    }
    // Dynamic: it grew to float's largest power of two, and the next growth (inf) was not kept.
    if (o.mode == LossScaleOptions::Mode::Dynamic) CHECK(largest == std::ldexp(1.0f, 127));
  }
}

TEST_CASE("loss scale config: defaults by precision, static and dynamic forms", "[loss_scale]") {
  auto doc = cfg::parse_document("x: 1\n", "t.yaml");
  CHECK(read_loss_scale(cfg::root(doc).child("loss_scale"), Precision::FP16).mode == LossScaleOptions::Mode::Dynamic);
  CHECK(read_loss_scale(cfg::root(doc).child("loss_scale"), Precision::FP32).mode == LossScaleOptions::Mode::None);
  CHECK(read_loss_scale(cfg::root(doc).child("loss_scale"), Precision::BF16).mode == LossScaleOptions::Mode::None);
  CHECK(options_of("none", Precision::FP16).mode == LossScaleOptions::Mode::None);
  LossScaleOptions d = options_of("dynamic");
  CHECK(d.mode == LossScaleOptions::Mode::Dynamic);
  CHECK(d.init_scale == 65536.0);
  CHECK(d.growth_factor == 2.0);
  CHECK(d.backoff_factor == 0.5);
  CHECK(d.growth_interval == 2000);
  LossScaleOptions st = options_of("128");
  CHECK(st.mode == LossScaleOptions::Mode::Static);
  CHECK(st.init_scale == 128.0);
  LossScaler fixed(st);
  fixed.update(false);  // a static scale never changes; the step is still skipped and counted
  CHECK(fixed.scale() == 128.0f);
  CHECK(fixed.skipped_total() == 1);
  LossScaleOptions m = options_of("{growth_factor: 4, backoff_factor: 0.25, growth_interval: 10}");
  CHECK(m.init_scale == 65536.0);
  CHECK(m.growth_factor == 4.0);
  CHECK(m.backoff_factor == 0.25);
  CHECK(m.growth_interval == 10);
  CHECK_THROWS_WITH(options_of("dinamic"), Catch::Contains("t.yaml:1:13: 'dinamic' is not a valid loss_scale for the train "
                                                           "section (did you mean 'dynamic'?)"));
  CHECK_THROWS_WITH(options_of("0"), Catch::Contains("t.yaml:1:13: 'loss_scale' must be a positive number"));
  CHECK_THROWS_WITH(options_of("{init_scal: 8}"), Catch::Contains("unknown key 'init_scal' in train.loss_scale (did you mean 'init_scale'?)"));
}

TEST_CASE("all_finite: false for one inf, -inf or NaN anywhere, on every backend", "[loss_scale][backends]") {
  for (const test::TestDevice& d : test::test_devices()) {
    SECTION(d.name) {
      auto ctx = make_context(d.device);
      auto k = make_kernel<OptimUpdateKernel>(*ctx, {});
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(1) << 20}) {
        std::vector<float> host(static_cast<size_t>(n));
        std::mt19937 rng{static_cast<uint32_t>(n)};
        std::uniform_real_distribution<float> u(-1.0e38f, 1.0e38f);  // large, finite values
        for (float& x : host) x = u(rng);
        Tensor g = ctx->empty(Shape{n});
        if (n) ctx->copy_from_host(g.data(), host.data(), g.bytes());
        CHECK(k->all_finite(g));
        if (n == 0) continue;
        for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()})
          for (int64_t at : {int64_t(0), n / 2, n - 1}) {
            INFO("n " << n << " at " << at << " value " << bad);
            ctx->copy_from_host(static_cast<float*>(g.data()) + at, &bad, sizeof(float));
            CHECK_FALSE(k->all_finite(g));
            ctx->copy_from_host(static_cast<float*>(g.data()) + at, &host[size_t(at)], sizeof(float));
          }
        CHECK(k->all_finite(g));
      }
    }
  }
}

TEST_CASE("loss scaling: a step with an inf gradient is skipped — weights, momentum and step count unchanged, scale halved",
          "[loss_scale]") {
  for (int replicas : {1, 2}) {
    SECTION(std::to_string(replicas) + " replica(s)") {
      std::vector<Snapshot> s = train_dp(experiment({"train.loss_scale={growth_interval: 3}"}), replicas, 7, {2, 3});
      CHECK(s[1].scale == 65536.0f);
      CHECK(same_bits(s[2].weights, s[1].weights));
      CHECK(same_bits(s[2].momentum, s[1].momentum));
      CHECK(s[2].optimizer_steps == 2);
      CHECK(s[2].scale == 32768.0f);
      CHECK(s[2].skipped == 1);
      CHECK(same_bits(s[3].weights, s[1].weights));
      CHECK(s[3].scale == 16384.0f);
      CHECK(s[3].skipped == 2);
      CHECK_FALSE(same_bits(s[4].weights, s[3].weights));  // training goes on
      CHECK(s[4].optimizer_steps == 3);
      CHECK(s[5].scale == 16384.0f);
      CHECK(s[6].scale == 32768.0f);  // grown after 3 finite steps in a row
      CHECK(s[6].optimizer_steps == 5);
    }
  }
}

TEST_CASE("loss scaling: a power-of-2 scale trains bit-identically to none with SGD, another within rounding", "[loss_scale]") {
  std::vector<Snapshot> none = train_dp(experiment({}), 1, 6);
  std::vector<Snapshot> pow2 = train_dp(experiment({"train.loss_scale=1024"}), 1, 6);
  std::vector<Snapshot> dyn = train_dp(experiment({"train.loss_scale=dynamic"}), 1, 6);
  std::vector<Snapshot> odd = train_dp(experiment({"train.loss_scale=1000"}), 1, 6);
  CHECK(none.back().scale == 1.0f);
  CHECK(same_bits(none.back().weights, pow2.back().weights));
  CHECK(same_bits(none.back().momentum, pow2.back().momentum));
  CHECK(same_bits(none.back().weights, dyn.back().weights));
  CHECK(max_diff(none.back().weights, odd.back().weights) < 1e-5);
  CHECK(pow2.back().skipped == 0);
  CHECK(dyn.back().scale == 65536.0f);
}

TEST_CASE("loss scaling: 3 replicas x 4 match 1 replica x 12 with skipped steps (8 steps, 1e-5)", "[loss_scale]") {
  RunSpec e = experiment({"train.loss_scale={growth_interval: 2}"});
  std::vector<Snapshot> one = train_dp(e, 1, 8, {1, 5});
  std::vector<Snapshot> three = train_dp(e, 3, 8, {1, 5});
  for (size_t s = 0; s < one.size(); ++s) {
    INFO("step " << s);
    CHECK(one[s].scale == three[s].scale);
    CHECK(one[s].skipped == three[s].skipped);
    CHECK(one[s].optimizer_steps == three[s].optimizer_steps);
  }
  CHECK(one.back().skipped == 2);
  CHECK(max_diff(one.back().weights, three.back().weights) < 1e-5);
}

TEST_CASE("loss scaling, device parallel: an inf on the first stage skips every stage's step", "[loss_scale]") {
  RunSpec e = experiment({"train.loss_scale={growth_interval: 2}", "strategy=device_parallel",
                             "placement={conv1: cpu:0, conv2: cpu:1}", "pipeline={microbatches: 2}"});
  std::vector<Snapshot> s = train_pipeline(e, 5, {1});
  CHECK(same_bits(s[1].weights, s[0].weights));
  CHECK(same_bits(s[1].momentum, s[0].momentum));
  CHECK(s[1].optimizer_steps == 1);
  CHECK(s[1].scale == 32768.0f);
  CHECK(s[1].skipped == 1);
  CHECK_FALSE(same_bits(s[2].weights, s[1].weights));
  CHECK(s[3].scale == 65536.0f);
  CHECK(s[4].optimizer_steps == 4);
  // The same steps on one device (data parallel, one replica): the same decisions, weights to rounding.
  std::vector<Snapshot> one = train_dp(experiment({"train.loss_scale={growth_interval: 2}"}), 1, 5, {1});
  CHECK(one.back().scale == s.back().scale);
  REQUIRE(one.back().named.size() == s.back().named.size());
  for (const auto& [name, w] : one.back().named) {
    INFO(name);
    REQUIRE(s.back().named.count(name));
    CHECK(max_diff(w, s.back().named.at(name)) < 1e-5);
  }
}
