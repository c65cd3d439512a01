// Sequence graphs (embedding, lstm, gru, simple_rnn, bidirectional, dense, sigmoid cross-entropy): layer shapes, parameters and Keras
// initialisers, and whole-graph gradients against central finite differences of the loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/graph/executor.h"
#include "core/graph/graph.h"
#include "core/ops/sigmoid_xent.h"
#include "graph_test_util.h"

using namespace trainer;

namespace {

// Token ids -> embedding -> lstm (every step) -> lstm (last step) -> one logit.
const char* kTokens = R"(
model:
  input: [6]
  layers:
    - {name: emb, type: embedding, input_dim: 7, output_dim: 3}
    - {name: seq, type: lstm, units: 4, return_sequences: true}
    - {name: last, type: lstm, units: 3}
    - {name: dense, type: dense, units: 1}
)";

// Features per step -> lstm without bias (every step) -> lstm (last step) -> one logit. The config
// reader accepts only [H, W, C] or [features] inputs, so the test sets the (steps, features) input
// on the parsed spec (the Graph itself takes any input rank).
const char* kFeatures = R"(
model:
  input: [5]
  layers:
    - {name: seq, type: lstm, units: 5, return_sequences: true, use_bias: false}
    - {name: last, type: lstm, units: 2}
    - {name: dense, type: dense, units: 1}
)";

ModelSpec spec_of(const char* yaml, const Shape& input) {
  auto doc = cfg::parse_document(yaml, "lstm_gradcheck.yaml");
  ModelSpec spec = parse_model(cfg::root(doc).child("model"));
  spec.input = input;
  spec.inputs[0].shape = input;
  return spec;
}

struct Setup {
  std::unique_ptr<OpContext> ctx = make_context(Device::cpu(), {2});
  std::unique_ptr<Executor> g;
  std::unique_ptr<SigmoidXentKernel> loss;
  Tensor x, labels;
  int logits = 0;

  Setup(const ModelSpec& spec, bool ids) {
    g = std::make_unique<Executor>(std::make_shared<const Graph>(spec), *ctx, 11);
    // Weights of order one instead of the initialisers' (embeddings ±0.05 would make most
    // gradients ~1e-6, below what float32 finite differences resolve).
    std::mt19937_64 wrng(13);
    std::uniform_real_distribution<float> uw(-0.5f, 0.5f);
    float* wp = g->params().weights().f32();
    for (int64_t i = 0; i < g->params().total_floats(); ++i) wp[i] = uw(wrng);
    loss = make_kernel<SigmoidXentKernel>(*ctx, {});
    logits = g->node_index("dense");
    std::mt19937_64 rng(12);
    const int64_t n = 3;
    x = Tensor::empty(spec.input.with_batch(n));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = ids ? float(rng() % 7) : normal(rng);
    labels = Tensor::empty(Shape{n}, DType::I32);
    for (int i = 0; i < n; ++i) labels.i32()[i] = i % 2;
  }
  double loss_value() {
    g->forward(x, true, logits);
    Tensor none;
    return loss->loss(g->output(logits), labels, none, 1.f).loss_sum;
  }
};

// Backprop against central differences for up to 12 values of every trainable parameter; returns
// how many were checked and how many of those had a gradient large enough (> 3e-4, ten times the
// absolute slack) to be a real test.
std::pair<int, int> gradcheck(Setup& s) {
  s.g->forward(s.x, true, s.logits);
  Tensor& dl = s.g->grad(s.logits);
  s.loss->loss(s.g->output(s.logits), s.labels, dl, 1.f);
  s.g->backward(dl, s.logits);
  const float* gp = s.g->params().grads().f32();
  std::vector<float> analytic(gp, gp + s.g->params().trainable_floats());
  float* w = s.g->params().weights().f32();
  int checked = 0, large = 0;
  for (const ParamEntry& e : s.g->params().entries()) {
    if (!e.spec.trainable) continue;
    const int64_t n = e.spec.shape.numel();
    for (int64_t k = 0; k < std::min<int64_t>(n, 12); ++k) {
      const int64_t i = e.offset + (k * 7919) % n;
      const double eps = 1e-2;
      const float saved = w[i];
      w[i] = saved + float(eps);
      const double up = s.loss_value();
      w[i] = saved - float(eps);
      const double down = s.loss_value();
      w[i] = saved;
      const double fd = (up - down) / (2 * eps), an = analytic[size_t(i)];
      INFO(e.name << "[" << (i - e.offset) << "]: finite difference " << fd << ", backprop " << an);
      CHECK(std::abs(fd - an) <= 2e-2 * std::max(std::abs(fd), std::abs(an)) + 3e-5);
      ++checked;
      large += std::abs(an) > 3e-4;
    }
  }
  return {checked, large};
}

}  // namespace

TEST_CASE("lstm and embedding layers: shapes, parameters, FLOPs and config errors") {
  Graph g(spec_of(kTokens, Shape{6}));
  const auto& nodes = g.nodes();
  CHECK(nodes[size_t(g.node_index("emb"))].shape == Shape{6, 3});
  CHECK(nodes[size_t(g.node_index("seq"))].shape == Shape{6, 4});
  CHECK(nodes[size_t(g.node_index("last"))].shape == Shape{3});
  std::vector<std::string> names;
  for (const ParamEntry& e : g.params().entries()) names.push_back(e.name + " " + e.spec.shape.str());
  CHECK(names == std::vector<std::string>{"emb/embeddings 7x3", "seq/kernel 3x16", "seq/recurrent_kernel 4x16",
                                          "seq/bias 16", "last/kernel 4x12", "last/recurrent_kernel 3x12",
                                          "last/bias 12", "dense/kernel 3x1", "dense/bias 1"});
  // Per step 2·4U·(F + U) multiply-adds' flops plus 13U element-wise; the embedding computes nothing.
  CHECK(nodes[size_t(g.node_index("emb"))].layer->flops() == 0);
  CHECK(nodes[size_t(g.node_index("seq"))].layer->flops() == 6 * (8 * 4 * (3 + 4) + 13 * 4));
  CHECK(test::error_of(R"(
model:
  input: [6]
  layers:
    - {name: l, type: lstm, units: 2}
)").find("lstm 'l' needs a (steps, features) input, got 6;") != std::string::npos);
  CHECK(test::error_of(R"(
model:
  input: [6]
  layers:
    - {name: e, type: embedding, input_dim: 5}
)").find("output_dim") != std::string::npos);
}

TEST_CASE("lstm and embedding initialisers are Keras': orthogonal, unit forget bias, uniform(-0.05, 0.05)") {
  Graph g(spec_of(kTokens, Shape{6}));
  auto ctx = make_context(Device::cpu(), {1});
  Executor gx(std::make_shared<const Graph>(std::move(g)), *ctx, 3);
  const std::vector<float> w = gx.params().download(*ctx);
  auto values = [&](const std::string& name) {
    for (const ParamEntry& e : gx.params().entries())
      if (e.name == name) return std::vector<float>(w.begin() + e.offset, w.begin() + e.offset + e.spec.shape.numel());
    FAIL("no parameter " << name);
    return std::vector<float>();
  };
  // seq/recurrent_kernel [4, 16]: orthonormal rows, R·Rᵀ = I.
  const std::vector<float> r = values("seq/recurrent_kernel");
  double worst = 0;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      double dot = 0;
      for (int k = 0; k < 16; ++k) dot += double(r[size_t(a * 16 + k)]) * r[size_t(b * 16 + k)];
      worst = std::max(worst, std::abs(dot - (a == b ? 1.0 : 0.0)));
    }
  CHECK(worst < 1e-6);
  // A tall shape (rows > columns: orthonormal columns), through init_param directly.
  ParamSpec tall{"k", Shape{9, 4}, InitKind::Orthogonal};
  std::vector<float> q(36);
  init_param(tall, "tall", 5, q.data());
  worst = 0;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      double dot = 0;
      for (int k = 0; k < 9; ++k) dot += double(q[size_t(k * 4 + a)]) * q[size_t(k * 4 + b)];
      worst = std::max(worst, std::abs(dot - (a == b ? 1.0 : 0.0)));
    }
  CHECK(worst < 1e-6);  // orthonormal columns
  const std::vector<float> bias = values("seq/bias");
  for (int k = 0; k < 16; ++k) CHECK(bias[size_t(k)] == (k >= 4 && k < 8 ? 1.0f : 0.0f));
  const std::vector<float> emb = values("emb/embeddings");
  float lo = 1, hi = -1;
  for (float v : emb) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo >= -0.05f);
  CHECK(hi <= 0.05f);
  CHECK(hi - lo > 0.02f);  // spread, not constant
  // Deterministic from the seed, and different for another seed.
  Graph g2(spec_of(kTokens, Shape{6}));
  Executor g2x(std::make_shared<const Graph>(std::move(g2)), *ctx, 3);
  CHECK(g2x.params().download(*ctx) == w);
  Graph g3(spec_of(kTokens, Shape{6}));
  Executor g3x(std::make_shared<const Graph>(std::move(g3)), *ctx, 4);
  CHECK(g3x.params().download(*ctx) != w);
}

TEST_CASE("gradcheck: embedding, two lstm layers, dense and sigmoid cross-entropy match finite differences") {
  Setup s(spec_of(kTokens, Shape{6}), true);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 70);
  CHECK(large > checked / 2);
}

TEST_CASE("gradcheck: lstm layers on a (steps, features) input match finite differences") {
  Setup s(spec_of(kFeatures, Shape{6, 5}), false);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 50);
  CHECK(large > checked / 2);
}

// The GRU's graphs: token ids -> embedding -> gru (every step) -> gru (last step); features -> gru
// without bias -> gru.
const char* kGruTokens = R"(
model:
  input: [6]
  layers:
    - {name: emb, type: embedding, input_dim: 7, output_dim: 3}
    - {name: seq, type: gru, units: 4, return_sequences: true}
    - {name: last, type: gru, units: 3}
    - {name: dense, type: dense, units: 1}
)";
const char* kGruFeatures = R"(
model:
  input: [5]
  layers:
    - {name: seq, type: gru, units: 5, return_sequences: true, use_bias: false}
    - {name: last, type: gru, units: 2}
    - {name: dense, type: dense, units: 1}
)";

TEST_CASE("gru layer: Keras's shapes, weights kernel [F, 3U], recurrent_kernel [U, 3U], bias [2, 3U], initialisers, errors") {
  Graph g(spec_of(kGruTokens, Shape{6}));
  CHECK(g.nodes()[size_t(g.node_index("seq"))].shape == Shape{6, 4});
  CHECK(g.nodes()[size_t(g.node_index("last"))].shape == Shape{3});
  const auto ps = g.nodes()[size_t(g.node_index("seq"))].layer->params();
  REQUIRE(ps.size() == 3);
  CHECK(ps[0].name == "kernel");
  CHECK(ps[0].shape == Shape{3, 12});
  CHECK(ps[0].init.kind == InitKind::GlorotUniform);
  CHECK(ps[1].name == "recurrent_kernel");
  CHECK(ps[1].shape == Shape{4, 12});
  CHECK(ps[1].init.kind == InitKind::Orthogonal);
  CHECK(ps[2].name == "bias");
  CHECK(ps[2].shape == Shape{2, 12});
  CHECK(find_layer("gru")->keras_name == "GRU");
  // Keras's GRU(4) on 3 features: 3·12 + 4·12 + 2·12 parameters.
  CHECK(g.nodes()[size_t(g.node_index("seq"))].layer->params()[0].shape.numel() +
            g.nodes()[size_t(g.node_index("seq"))].layer->params()[1].shape.numel() + 24 == 108);
  using trainer::test::error_of;
  CHECK_THAT(error_of("model:\n  input: [5, 3]\n  layers:\n    - {type: gru, units: 2, reset_after: false}\n"),
             Catch::StartsWith("test.yaml:4:42:") && Catch::Contains("only reset_after: true"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: gru, units: 2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a (steps, features) input"));
  CHECK_THAT(error_of("model:\n  input: [5, 3]\n  layers:\n    - {type: gru, units: 2, activation: relu}\n"),
             Catch::StartsWith("test.yaml:4:") && Catch::Contains("unknown key 'activation'"));
}

TEST_CASE("gradcheck: embedding, two gru layers, dense and sigmoid cross-entropy match finite differences") {
  Setup s(spec_of(kGruTokens, Shape{6}), true);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 50);
  CHECK(large > checked / 2);
}

TEST_CASE("gradcheck: gru layers on a (steps, features) input match finite differences") {
  Setup s(spec_of(kGruFeatures, Shape{6, 5}), false);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 50);
  CHECK(large > checked / 2);
}

// Bidirectional layers (each merge mode, both output forms): token ids -> embedding -> gru both
// ways (every step, mul) -> lstm both ways (last step, concat); features -> gru both ways without
// bias (every step, ave) -> lstm both ways (last step, sum). The embedding's and the first layer's
// gradients pass through the second's input gradient (the two halves' summed).
const char* kBiTokens = R"(
model:
  input: [6]
  layers:
    - {name: emb, type: embedding, input_dim: 7, output_dim: 3}
    - {name: seq, type: bidirectional, layer: {type: gru, units: 3, return_sequences: true}, merge_mode: mul}
    - {name: last, type: bidirectional, layer: {type: lstm, units: 2}}
    - {name: dense, type: dense, units: 1}
)";
const char* kBiFeatures = R"(
model:
  input: [5]
  layers:
    - {name: seq, type: bidirectional, layer: {type: gru, units: 4, return_sequences: true, use_bias: false}, merge_mode: ave}
    - {name: last, type: bidirectional, layer: {type: lstm, units: 2}, merge_mode: sum}
    - {name: dense, type: dense, units: 1}
)";

TEST_CASE("gradcheck: embedding, bidirectional gru (mul) and lstm (concat) match finite differences") {
  Setup s(spec_of(kBiTokens, Shape{6}), true);
  auto [checked, large] = gradcheck(s);
  INFO(large << " of " << checked << " large");
  CHECK(checked > 100);
  CHECK(large > checked / 2);
}

TEST_CASE("gradcheck: bidirectional gru (ave) and lstm (sum) on a (steps, features) input match finite differences") {
  Setup s(spec_of(kBiFeatures, Shape{6, 5}), false);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 80);
  CHECK(large > checked / 2);
}

// simple_rnn (Keras SimpleRNN): token ids -> embedding -> simple_rnn tanh (every step) -> simple_rnn
// tanh with a bias (last step) -> one logit; features -> simple_rnn sigmoid without bias (every
// step) -> simple_rnn linear (last step). relu is left to the op's tests against float64: its kink
// at 0 lies within these differences' 1e-2 step of some pre-activations (seq/bias[2]: -0.062
// against backprop's -0.053 with a relu last layer).
const char* kRnnTokens = R"(
model:
  input: [6]
  layers:
    - {name: emb, type: embedding, input_dim: 7, output_dim: 3}
    - {name: seq, type: simple_rnn, units: 4, return_sequences: true}
    - {name: last, type: simple_rnn, units: 3, bias_initializer: {type: constant, value: 0.3}}
    - {name: dense, type: dense, units: 1}
)";
const char* kRnnFeatures = R"(
model:
  input: [5]
  layers:
    - {name: seq, type: simple_rnn, units: 5, return_sequences: true, use_bias: false, activation: sigmoid}
    - {name: last, type: simple_rnn, units: 2, activation: linear}
    - {name: dense, type: dense, units: 1}
)";

TEST_CASE("simple_rnn layer: Keras's shapes, weights kernel [F, U], recurrent_kernel [U, U], bias [U], initialisers, errors") {
  Graph g(spec_of(kRnnTokens, Shape{6}));
  CHECK(g.nodes()[size_t(g.node_index("seq"))].shape == Shape{6, 4});
  CHECK(g.nodes()[size_t(g.node_index("last"))].shape == Shape{3});
  const auto ps = g.nodes()[size_t(g.node_index("seq"))].layer->params();
  REQUIRE(ps.size() == 3);
  CHECK((ps[0].name == "kernel" && ps[0].shape == Shape{3, 4} && ps[0].init.kind == InitKind::GlorotUniform));
  CHECK((ps[1].name == "recurrent_kernel" && ps[1].shape == Shape{4, 4} && ps[1].init.kind == InitKind::Orthogonal));
  CHECK((ps[2].name == "bias" && ps[2].shape == Shape{4} && ps[2].init.kind == InitKind::Zeros));
  CHECK(find_layer("simple_rnn")->keras_name == "SimpleRNN");
  CHECK(g.nodes()[size_t(g.node_index("last"))].layer->describe().text("activation") == "tanh");
  using trainer::test::error_of;
  CHECK_THAT(error_of("model:\n  input: [5, 3]\n  layers:\n    - {type: simple_rnn, units: 2, activation: gelu}\n"),
             Catch::StartsWith("test.yaml:4:48:") && Catch::Contains("tanh, relu, sigmoid, linear"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: simple_rnn, units: 2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a (steps, features) input"));
  CHECK_THAT(error_of("model:\n  input: [5, 3]\n  layers:\n    - {type: simple_rnn}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'units'"));
}

TEST_CASE("gradcheck: embedding, two simple_rnn layers, dense and sigmoid cross-entropy match finite differences") {
  Setup s(spec_of(kRnnTokens, Shape{6}), true);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 40);
  CHECK(large > checked / 2);
}

TEST_CASE("gradcheck: simple_rnn sigmoid (no bias) and linear on a (steps, features) input match finite differences") {
  Setup s(spec_of(kRnnFeatures, Shape{6, 5}), false);
  auto [checked, large] = gradcheck(s);
  CHECK(checked > 40);
  CHECK(large > checked / 2);
}
