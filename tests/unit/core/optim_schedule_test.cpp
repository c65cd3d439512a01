// Learning-rate schedules and optimizer config reading.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/optim/optimizer.h"
#include "core/ops/context.h"
#include "core/optim/schedule.h"
#include "core/graph/executor.h"
#include "core/runtime/trainee.h"

using namespace trainer;
using Catch::Detail::Approx;

namespace {
cfg::Node section(const std::string& yaml) {
  auto doc = cfg::parse_document(yaml, "s.yaml");
  return cfg::root(doc).child("s");
}
}  // namespace

TEST_CASE("schedule: poly is Keras' per-epoch lr0 * (1 - epoch/epochs)^power") {
  auto s = make_schedule(read_schedule(section("s: {type: poly, power: 1.0}")), 70);
  CHECK(s->lr(5e-3, 0, 0.0) == Approx(5e-3));
  CHECK(s->lr(5e-3, 0, 0.9) == Approx(5e-3));  // constant within an epoch
  CHECK(s->lr(5e-3, 35, 0.0) == Approx(2.5e-3));
  CHECK(s->lr(5e-3, 69, 0.5) == Approx(5e-3 / 70));
  auto p2 = make_schedule(read_schedule(section("s: {type: poly, power: 2.0, per_step: true}")), 10);
  CHECK(p2->lr(1.0, 4, 0.5) == Approx(std::pow(1 - 4.5 / 10, 2)));
}

TEST_CASE("schedule: step, cosine, exponential and linear warmup") {
  auto st = make_schedule(read_schedule(section("s: {type: step, every: 3, gamma: 0.5}")), 10);
  CHECK(st->lr(1.0, 2, 0.99) == Approx(1.0));
  CHECK(st->lr(1.0, 3, 0.0) == Approx(0.5));
  CHECK(st->lr(1.0, 7, 0.0) == Approx(0.25));
  auto co = make_schedule(read_schedule(section("s: {type: cosine, min_factor: 0.1}")), 4);
  CHECK(co->lr(1.0, 0, 0.0) == Approx(1.0));
  CHECK(co->lr(1.0, 2, 0.0) == Approx(0.55));
  auto ex = make_schedule(read_schedule(section("s: {type: exponential, gamma: 0.9}")), 4);
  CHECK(ex->lr(2.0, 2, 0.0) == Approx(2.0 * 0.81));
  auto wu = make_schedule(read_schedule(section("s: {type: constant, warmup_epochs: 2}")), 10);
  CHECK(wu->lr(1.0, 0, 0.0) == Approx(0.0));
  CHECK(wu->lr(1.0, 0, 0.5) == Approx(0.25));
  CHECK(wu->lr(1.0, 1, 0.5) == Approx(0.75));
  CHECK(wu->lr(1.0, 2, 0.0) == Approx(1.0));
}

// decay_after_warmup: Keras 3's CosineDecay(initial_learning_rate = warmup_start·lr, warmup_target =
// lr, warmup_steps = w, decay_steps = total - w, alpha = min_factor), written from its __call__
// (keras/src/optimizers/schedules/learning_rate_schedule.py): the ramp, then the decay over the rest.
TEST_CASE("schedule: decay_after_warmup is Keras 3's CosineDecay with warmup_steps") {
  const int epochs = 5, steps = 40;
  const double lr = 6e-4, start = 0.1, alpha = 0.05, w = 1.5;  // warmup over 60 steps of 200
  auto keras = [&](double step) {
    const double warmup_steps = w * steps, decay_steps = epochs * steps - warmup_steps;
    step = std::min(step, decay_steps + warmup_steps);
    if (step < warmup_steps) return (lr - start * lr) * (step / warmup_steps) + start * lr;
    const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * (step - warmup_steps) / decay_steps));
    return lr * ((1 - alpha) * cosine + alpha);
  };
  auto s = make_schedule(read_schedule(section("s: {type: cosine, min_factor: 0.05, per_step: true, warmup_epochs: 1.5, "
                                               "warmup_start: 0.1, decay_after_warmup: true}")),
                         epochs);
  for (int step = 0; step < epochs * steps; ++step) {
    INFO("step " << step);
    CHECK(s->lr(lr, step / steps, double(step % steps) / steps) == Approx(keras(step)).epsilon(1e-12));
  }
  CHECK(s->lr(lr, 1, 0.5) == Approx(lr));  // the ramp's end is the decay's start: the full rate
  CHECK_THAT(s->describe(), Catch::Contains("warmup 1.5 epochs from 0.1·lr, then the decay"));
  // Without it the ramp multiplies a cosine that started at epoch 0 (timm's form): below Keras's at the ramp's end.
  auto m = make_schedule(read_schedule(section("s: {type: cosine, min_factor: 0.05, per_step: true, warmup_epochs: 1.5, "
                                               "warmup_start: 0.1}")),
                         epochs);
  CHECK(m->lr(lr, 1, 0.5) < 0.9 * lr);
  // Poly decays over the epochs left too; per-epoch schedules step at whole epochs after the ramp.
  auto p = make_schedule(read_schedule(section("s: {type: poly, warmup_epochs: 2, decay_after_warmup: true}")), 10);
  CHECK(p->lr(1.0, 1, 0.5) == Approx(0.75));
  CHECK(p->lr(1.0, 2, 0.0) == Approx(1.0));
  CHECK(p->lr(1.0, 6, 0.5) == Approx(0.5));  // (1 - 4/8)
  CHECK_THROWS_WITH(read_schedule(section("s: {type: cosine, decay_after_warmup: true}")),
                    Catch::StartsWith("s.yaml:1:39:") && Catch::Contains("decay_after_warmup needs a warmup"));
}

TEST_CASE("schedule and optimizer: config errors") {
  CHECK_THROWS_WITH(make_schedule(read_schedule(section("s: {type: polly}")), 3), Catch::Contains("did you mean 'poly'"));
  CHECK_THROWS_WITH(make_schedule(read_schedule(section("s: {type: poly, powr: 2}")), 3), Catch::Contains("unknown key 'powr'"));
  CHECK_THROWS_WITH(read_optimizer(section("s: {type: adamm}")), Catch::Contains("did you mean 'adam'"));
  CHECK_THROWS_WITH(read_optimizer(section("s: {type: sgd, lr: -1}")), Catch::StartsWith("s.yaml:1:20:"));
  CHECK_THROWS_WITH(read_optimizer(section("s: {type: sgd, nesterov: true}")), Catch::Contains("nesterov needs momentum"));
  auto opt = make_optimizer(read_optimizer(section("s: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 1e-4}")));
  CHECK(opt->base_lr() == Approx(0.1));
  CHECK_THAT(opt->describe(), Catch::Contains("nesterov"));
}

// Each convention's defaults where Keras 3 and torch.optim differ; given keys win under both.
TEST_CASE("optimizer: defaults follow the convention (Keras 3's or torch.optim's)") {
  auto spec = [](const std::string& body) { return read_optimizer(section("s: {" + body + "}")); };
  OptimizerSpec k = spec("type: adam"), p = spec("type: adam, convention: pytorch");
  CHECK(k.epsilon == 1e-7);
  CHECK(p.epsilon == 1e-8);
  CHECK(k.lr == 1e-3);
  CHECK(p.lr == 1e-3);
  CHECK(spec("type: adamw").weight_decay == 0.004);
  CHECK(spec("type: adamw, convention: pytorch").weight_decay == 0.01);
  k = spec("type: rmsprop"), p = spec("type: rmsprop, convention: pytorch");
  CHECK((k.lr == 1e-3 && k.rho == 0.9 && k.epsilon == 1e-7));
  CHECK((p.lr == 1e-2 && p.rho == 0.99 && p.epsilon == 1e-8));
  CHECK(spec("type: sgd").lr == 0.01);
  CHECK(spec("type: sgd, convention: pytorch").lr == 1e-3);
  p = spec("type: rmsprop, convention: pytorch, lr: 0.5, rho: 0.8, epsilon: 0.001");
  CHECK((p.lr == 0.5 && p.rho == 0.8 && p.epsilon == 0.001));
}

// optimizer.exclude_from_weight_decay: the matching parameters (a pattern searched in the name, as
// Keras's re.search) get no decay, under both conventions and whatever ranges the update is cut in.
TEST_CASE("optimizer: exclude_from_weight_decay leaves the matching parameters undecayed") {
  auto ctx = make_context(Device::cpu(), {1});
  const std::vector<NamedSpan> params = {{"fc/kernel", 0, 4}, {"fc/bias", 4, 6}, {"ln/gamma", 6, 8}, {"out/kernel", 8, 10}};
  const std::vector<float> w0 = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10};
  for (const char* conv : {"keras", "pytorch"})
    for (const char* type : {"sgd", "adamw", "rmsprop"}) {
      INFO(type << ", " << conv);
      auto spec = read_optimizer(section(std::string("s: {type: ") + type + ", lr: 0.1, weight_decay: 0.5, convention: " +
                                         conv + ", exclude_from_weight_decay: [bias, \"^ln/\"]}"));
      CHECK(spec.exclude_from_weight_decay == std::vector<std::string>{"bias", "^ln/"});
      auto opt = make_optimizer(spec);
      Tensor w = ctx->empty(Shape{10}), g = ctx->zeros(Shape{10});
      std::copy(w0.begin(), w0.end(), w.f32());
      opt->bind(*ctx, w, g);
      opt->exclude_from_decay(params);
      opt->begin_step();
      opt->update(0, 5, 0.1f, 1.0f);  // ranges that cut through parameters
      opt->update(5, 7, 0.1f, 1.0f);
      opt->update(7, 10, 0.1f, 1.0f);
      for (int i = 0; i < 10; ++i) {
        INFO("element " << i);
        const bool excluded = i >= 4 && i < 8;
        if (excluded) CHECK(w.f32()[i] == w0[size_t(i)]);  // a zero gradient and no decay: unchanged
        else CHECK(std::abs(w.f32()[i]) < std::abs(w0[size_t(i)]));
      }
    }
  CHECK_THROWS_WITH(read_optimizer(section("s: {type: adamw, exclude_from_weight_decay: bias}")),
                    Catch::Contains("must be a list of name patterns"));
  CHECK_THROWS_WITH(read_optimizer(section("s: {type: adamw, exclude_from_weight_decay: [\"(\"]}")),
                    Catch::StartsWith("s.yaml:1:46:") && Catch::Contains("is not a valid pattern"));
}

// bind_optimizer's spans run over each parameter's alignment padding, so excluded neighbours (a
// bias, then a layer norm's gamma and beta: 7 floats each, each padded to 16) are one undecayed
// piece, and the update is cut once around it instead of at every gap.
TEST_CASE("optimizer: bind_optimizer merges neighbouring excluded parameters across their padding") {
  auto doc = cfg::parse_document(R"(model:
  input: [5]
  layers:
    - {name: a, type: dense, units: 7}
    - {name: ln, type: layer_norm}
    - {name: b, type: dense, units: 3}
)",
                                 "m.yaml");
  auto ctx = make_context(Device::cpu(), {1});
  Executor ex(std::make_shared<const Graph>(parse_model(cfg::root(doc).child("model"))), *ctx, 1);
  auto opt = make_optimizer(read_optimizer(section("s: {type: adamw, exclude_from_weight_decay: [bias, gamma, beta]}")));
  bind_optimizer(*opt, *ctx, ex.params());
  std::map<std::string, int64_t> at;
  for (const ParamEntry& e : ex.params().entries()) at[e.name] = e.offset;
  REQUIRE(opt->no_decay_spans().size() == 2);
  CHECK(opt->no_decay_spans()[0] == std::pair<int64_t, int64_t>{at["a/bias"], at["b/kernel"]});
  CHECK(opt->no_decay_spans()[1] == std::pair<int64_t, int64_t>{at["b/bias"], ex.params().trainable_floats()});
}
