// Keras initialisers: each form read from a layer's config, each distribution's draw against its float64 moments, the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/graph/executor.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {

// One dense layer of `units` on a [rows] input with `keys` added to its config: its kernel is
// [rows, units], drawn with the run's seed 3.
std::string dense(const std::string& keys, int rows = 400, int units = 500) {
  return "model:\n  input: [" + std::to_string(rows) + "]\n  layers:\n    - {name: d, type: dense, units: " +
         std::to_string(units) + (keys.empty() ? "" : ", " + keys) + "}\n";
}

// A parameter's initial values (the run's seed 3).
std::vector<double> initial(const std::string& yaml, const std::string& param) {
  auto ctx = make_context(Device::cpu(), {1});
  Executor gx(std::make_shared<const Graph>(build(yaml)), *ctx, 3);
  for (const ParamEntry& e : gx.params().entries())
    if (e.name == param) {
      const float* w = gx.params().weights().f32() + e.offset;
      return std::vector<double>(w, w + e.spec.shape.numel());
    }
  FAIL("no parameter " << param);
  return {};
}

struct Moments {
  double mean = 0, stddev = 0, lo = 1e300, hi = -1e300;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x, m.lo = std::min(m.lo, x), m.hi = std::max(m.hi, x);
  m.mean /= double(v.size());
  for (double x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / double(v.size()));
  return m;
}

// The sample moments of n draws against the distribution's: the mean within 6 standard errors
// (sd/sqrt(n)), the deviation within 6 of its own (about sd/sqrt(2n) for these shapes).
void check_moments(const std::vector<double>& v, double mean, double sd) {
  const double n = double(v.size());
  Moments m = moments(v);
  INFO("sample mean " << m.mean << " sd " << m.stddev << " against " << mean << ", " << sd);
  CHECK(std::abs(m.mean - mean) <= 6 * sd / std::sqrt(n));
  CHECK(std::abs(m.stddev - sd) <= 6 * sd / std::sqrt(2 * n));
}

}  // namespace

TEST_CASE("initializer: every name, Keras class name and alias, the map and the serialised form") {
  struct Case {
    const char* value;
    InitKind kind;
  };
  for (Case c : {Case{"zeros", InitKind::Zeros}, {"Ones", InitKind::Ones}, {"constant", InitKind::Constant},
                 {"random_normal", InitKind::RandomNormal}, {"normal", InitKind::RandomNormal},
                 {"uniform", InitKind::RandomUniform}, {"RandomUniform", InitKind::RandomUniform},
                 {"truncated_normal", InitKind::TruncatedNormal}, {"glorot_uniform", InitKind::GlorotUniform},
                 {"GlorotNormal", InitKind::GlorotNormal}, {"he_uniform", InitKind::HeUniform},
                 {"he_normal", InitKind::HeNormal}, {"lecun_uniform", InitKind::LecunUniform},
                 {"LecunNormal", InitKind::LecunNormal}, {"variance_scaling", InitKind::VarianceScaling},
                 {"orthogonal", InitKind::Orthogonal}}) {
    INFO(c.value);
    Graph g = build(dense(std::string("kernel_initializer: ") + c.value, 4, 3));
    CHECK(g.nodes().back().layer->params()[0].init == c.kind);
  }
  Graph m = build(dense("kernel_initializer: {type: random_normal, mean: 0.5, stddev: 0.02}", 4, 3));
  const Initializer a = m.nodes().back().layer->params()[0].init;
  CHECK(a.kind == InitKind::RandomNormal);
  CHECK(a.mean == 0.5);
  CHECK(a.stddev == 0.02);
  Graph k = build(dense("kernel_initializer: {class_name: VarianceScaling, config: {scale: 2.0, mode: fan_out, "
                        "distribution: uniform}, module: keras.initializers}",
                        4, 3));
  const Initializer b = k.nodes().back().layer->params()[0].init;
  CHECK(b.kind == InitKind::VarianceScaling);
  CHECK(b.scale == 2.0);
  CHECK(b.mode == Initializer::Mode::FanOut);
  CHECK(b.distribution == Initializer::Distribution::Uniform);
  // Keras's defaults for what is not given.
  Graph d = build(dense("kernel_initializer: {type: random_uniform}, bias_initializer: truncated_normal", 4, 3));
  const Initializer u = d.nodes().back().layer->params()[0].init;
  CHECK(u.minval == -0.05);
  CHECK(u.maxval == 0.05);
  const Initializer t = d.nodes().back().layer->params()[1].init;
  CHECK(t.kind == InitKind::TruncatedNormal);
  CHECK(t.mean == 0.0);
  CHECK(t.stddev == 0.05);
}

TEST_CASE("initializer: each distribution's draws against its float64 mean, deviation and support") {
  SECTION("random_normal: untruncated") {
    auto w = initial(dense("kernel_initializer: {type: random_normal, mean: 0.1, stddev: 0.02}"), "d/kernel");
    check_moments(w, 0.1, 0.02);
    size_t beyond = 0;  // 4.55% of a normal lies beyond two deviations
    for (double x : w) beyond += std::abs(x - 0.1) > 0.04;
    CHECK(double(beyond) / double(w.size()) > 0.04);
  }
  SECTION("truncated_normal: redrawn beyond two deviations; its own deviation 0.8796 of stddev") {
    auto w = initial(dense("kernel_initializer: {type: truncated_normal, mean: -1, stddev: 0.5}"), "d/kernel");
    Moments m = moments(w);
    CHECK(m.lo >= -2.0);
    CHECK(m.hi <= 0.0);
    check_moments(w, -1.0, 0.5 * 0.87962566103423978);
  }
  SECTION("random_uniform and constant") {
    auto w = initial(dense("kernel_initializer: {type: random_uniform, minval: 1, maxval: 3}"), "d/kernel");
    Moments m = moments(w);
    CHECK(m.lo >= 1.0);
    CHECK(m.hi < 3.0);
    check_moments(w, 2.0, 2.0 / std::sqrt(12.0));
    for (double x : initial(dense("bias_initializer: {type: constant, value: 0.25}"), "d/bias")) CHECK(x == 0.25);
  }
  SECTION("variance_scaling: each mode and distribution, from the kernel's fans (400 in, 500 out)") {
    struct Case {
      const char* keys;
      double n;
      bool uniform;
    };
    for (Case c : {Case{"scale: 2.0", 400, false}, {"scale: 3.0, mode: fan_out, distribution: untruncated_normal", 500, false},
                   {"mode: fan_avg, distribution: uniform", 450, true}}) {
      INFO(c.keys);
      auto w = initial(dense(std::string("kernel_initializer: {type: variance_scaling, ") + c.keys + "}"), "d/kernel");
      const double scale = c.keys[7] == '2' ? 2.0 : c.keys[7] == '3' ? 3.0 : 1.0, sd = std::sqrt(scale / c.n);
      check_moments(w, 0.0, sd);
      if (c.uniform) CHECK(moments(w).hi <= std::sqrt(3.0) * sd);
    }
    // The named members: he_normal is variance_scaling(2, fan_in, truncated_normal), lecun_uniform (1, fan_in, uniform).
    check_moments(initial(dense("kernel_initializer: he_normal"), "d/kernel"), 0.0, std::sqrt(2.0 / 400));
    auto lu = initial(dense("kernel_initializer: lecun_uniform"), "d/kernel");
    check_moments(lu, 0.0, std::sqrt(1.0 / 400));
    CHECK(moments(lu).hi <= std::sqrt(3.0 / 400));
  }
  SECTION("orthogonal with a gain: the columns orthogonal, of length gain") {
    auto w = initial(dense("kernel_initializer: {type: orthogonal, gain: 2.0}", 6, 4), "d/kernel");
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) {
        double dot = 0;
        for (int r = 0; r < 6; ++r) dot += w[size_t(r * 4 + a)] * w[size_t(r * 4 + b)];
        CHECK(dot == Approx(a == b ? 4.0 : 0.0).margin(1e-5));
      }
  }
}

TEST_CASE("initializer: Keras's fans of a shape") {
  CHECK(keras_fans(Shape{}) == std::pair<int64_t, int64_t>{1, 1});
  CHECK(keras_fans(Shape{7}) == std::pair<int64_t, int64_t>{7, 7});
  CHECK(keras_fans(Shape{3, 5}) == std::pair<int64_t, int64_t>{3, 5});
  CHECK(keras_fans(Shape{3, 3, 8, 16}) == std::pair<int64_t, int64_t>{72, 144});
  CHECK(keras_fans(Shape{768, 12, 64}) == std::pair<int64_t, int64_t>{768 * 12, 768 * 64});
}

TEST_CASE("initializer: the keys of each layer (Keras's names) reach its parameters") {
  Graph g = build(R"(
model:
  input: [6]
  layers:
    - {name: e, type: embedding, input_dim: 20, output_dim: 8, embeddings_initializer: {type: random_normal, stddev: 0.02}}
    - {name: p, type: position_embedding, initializer: zeros}
    - {name: ln, type: layer_norm, gamma_initializer: {type: constant, value: 2}, beta_initializer: ones}
    - {name: a, type: multi_head_attention, num_heads: 2, key_dim: 4, bias_initializer: ones,
       kernel_initializer: {type: random_normal, stddev: 0.02}, output_kernel_initializer: {type: random_normal, stddev: 0.004}}
    - {name: b, type: multi_head_attention, num_heads: 2, key_dim: 4, kernel_initializer: he_normal}
    - {name: l, type: lstm, units: 3, return_sequences: true, kernel_initializer: lecun_normal,
       recurrent_initializer: {type: orthogonal, gain: 0.5}, bias_initializer: {type: constant, value: 0.1}}
)");
  auto params = [&](const char* node) { return g.nodes()[size_t(g.node_index(node))].layer->params(); };
  CHECK(params("e")[0].init.stddev == 0.02);
  CHECK(params("p")[0].init == InitKind::Zeros);
  CHECK(params("ln")[0].init.value == 2.0);
  CHECK(params("ln")[1].init == InitKind::Ones);
  auto a = params("a");
  REQUIRE(a.size() == 8);
  for (size_t i : {0, 2, 4}) CHECK(a[i].init.stddev == 0.02);
  CHECK(a[6].name == "attention_output/kernel");
  CHECK(a[6].init.stddev == 0.004);
  for (size_t i : {1, 3, 5, 7}) CHECK(a[i].init == InitKind::Ones);
  auto b = params("b");  // the output projection follows kernel_initializer unless given its own
  CHECK(b[6].init == InitKind::HeNormal);
  CHECK(b[7].init == InitKind::Zeros);
  auto l = params("l");
  CHECK(l[0].init == InitKind::LecunNormal);
  CHECK(l[1].init.gain == 0.5);
  CHECK(l[2].init.value == 0.1);
  CHECK(l[2].init.forget_gate_ones);

  // An LSTM's unit_forget_bias puts ones over the forget gate's quarter of the drawn bias, as
  // Keras's concatenation of bias_initializer(U), ones(U), bias_initializer(2U).
  const std::string lstm = "model:\n  input: [5, 2]\n  layers:\n    - {name: l, type: lstm, units: 3, "
                           "bias_initializer: {type: constant, value: 0.1}";
  auto bias = initial(lstm + "}\n", "l/bias");
  REQUIRE(bias.size() == 12);
  for (size_t i = 0; i < 12; ++i) CHECK(bias[i] == (i >= 3 && i < 6 ? 1.0 : double(0.1f)));
  for (double x : initial(lstm + ", unit_forget_bias: false}\n", "l/bias")) CHECK(x == double(0.1f));
  // batchnorm's four, the moving statistics included.
  Graph n = build(R"(
model:
  input: [4, 4, 3]
  layers:
    - {name: bn, type: batchnorm, gamma_initializer: zeros, moving_variance_initializer: {type: constant, value: 4}}
)");
  auto bn = n.nodes().back().layer->params();
  CHECK(bn[0].init == InitKind::Zeros);
  CHECK(bn[1].init == InitKind::Zeros);
  CHECK(bn[2].init == InitKind::Zeros);
  CHECK(bn[3].init.value == 4.0);
}

TEST_CASE("initializer: config errors name file:line:col") {
  CHECK_THAT(error_of(dense("kernel_initializer: glorot_unifrom")),
             Catch::StartsWith("test.yaml:4:62: 'glorot_unifrom' is not a valid kernel_initializer") &&
                 Catch::Contains("did you mean 'glorot_uniform'"));
  CHECK_THAT(error_of(dense("kernel_initializer: {type: random_normal, stdev: 0.02}")),
             Catch::Contains("unknown key 'stdev'") && Catch::Contains("did you mean 'stddev'"));
  CHECK_THAT(error_of(dense("kernel_initializer: {type: random_normal, stddev: 0}")),
             Catch::StartsWith("test.yaml:4:") && Catch::Contains("stddev must be above 0"));
  CHECK_THAT(error_of(dense("kernel_initializer: {type: random_uniform, minval: 1, maxval: 1}")),
             Catch::Contains("random_uniform needs minval < maxval"));
  CHECK_THAT(error_of(dense("kernel_initializer: {type: he_normal, seed: 4}")),
             Catch::Contains("the run's top-level `seed`"));
  CHECK_THAT(error_of(dense("kernel_initializer: {type: variance_scaling, mode: fan_ag}")),
             Catch::Contains("did you mean 'fan_avg'"));
  CHECK_THAT(error_of(dense("kernel_initializer: {type: glorot_uniform, scale: 2}")),
             Catch::Contains("unknown key 'scale'"));
  CHECK_THAT(error_of(dense("kernel_initializer: {class_name: RandomNormal, config: {stddev: 0.02}, cfg: 1}")),
             Catch::Contains("unknown key 'cfg'"));
  CHECK_THAT(error_of(dense("kernel_initializer: {stddev: 0.02}")), Catch::Contains("missing required key 'type'"));
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {name: e, type: embedding, input_dim: 9, output_dim: 8}\n"
                     "    - {name: d, type: dense, units: 9, tie: e, kernel_initializer: zeros}\n"),
             Catch::StartsWith("test.yaml:5:68: a dense layer with tie: e has e's table as its kernel"));
  CHECK_THAT(error_of(dense("kernel_initialiser: he_normal")),
             Catch::Contains("unknown key 'kernel_initialiser'") && Catch::Contains("did you mean 'kernel_initializer'"));
}
