// conv1d, max_pool1d and avg_pool1d (Keras Conv1D, MaxPooling1D, AveragePooling1D): shapes, parameters and errors; bit-identical to their 2D forms on a one-row image; causal padding equal to zero padding before the steps, and causal.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>

#include "core/graph/executor.h"
#include "core/graph/graph.h"
#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;
using trainer::test::Net;
using trainer::test::randoms;

namespace {

std::string model(const std::string& input, const std::string& layer) {
  return "model:\n  input: " + input + "\n  layers:\n    - " + layer + "\n";
}

}  // namespace

TEST_CASE("conv1d: Keras's output lengths, kernel [k, in, filters], summary type, and config errors") {
  struct Want {
    const char* opts;
    int64_t steps;
  };
  for (const Want& w : {Want{"kernel: 3", 18}, Want{"kernel: 3, padding: same", 20}, Want{"kernel: 3, padding: causal", 20},
                        Want{"kernel: 3, strides: 2, padding: same", 10}, Want{"kernel: 3, strides: 3", 6},
                        Want{"kernel: 2, dilation: 3, padding: causal", 20}, Want{"kernel: 2, dilation: 3", 17},
                        Want{"kernel: 4, strides: 2, padding: causal", 10}}) {
    INFO(w.opts);
    Graph g = build(model("[20, 4]", std::string("{name: c, type: conv1d, filters: 6, ") + w.opts + "}"));
    CHECK(g.output_shape() == Shape{w.steps, 6});
    const Layer& l = *g.nodes()[0].layer;
    REQUIRE(l.params().size() == 2);
    CHECK(l.params()[0].name == "kernel");
    CHECK(l.params()[0].shape[1] == 4);
    CHECK(l.params()[0].shape[2] == 6);
    CHECK(l.params()[0].fan_in == l.params()[0].shape[0] * 4);  // Keras's compute_fans: k·in, k·filters
  }
  CHECK(find_layer("conv1d")->keras_name == "Conv1D");
  CHECK(build(model("[9, 2]", "{type: conv1d, filters: 3, kernel: 2, activation: relu}")).nodes().size() == 2);
  CHECK_THAT(error_of(model("[8, 8, 3]", "{type: conv1d, filters: 3, kernel: 2}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a sequence input (steps, channels)"));
  CHECK_THAT(error_of(model("[4, 3]", "{type: conv1d, filters: 3, kernel: 5}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("does not fit its 4 steps"));
  CHECK_THAT(error_of(model("[9, 3]", "{type: conv1d, filters: 3, kernel: 3, padding: full}")),
             Catch::StartsWith("test.yaml:4:54:") && Catch::Contains("valid, same, causal"));
  CHECK_THAT(error_of(model("[9, 3]", "{type: conv1d, filters: 3, kernel: 3, strides: 2, dilation: 2}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("strides > 1 with dilation > 1"));
}

TEST_CASE("conv1d: bit-identical to conv2d on a one-row image (valid, same, strides, dilation), outputs and gradients, 1-3 threads") {
  struct Pair {
    const char *one, *two;  // conv1d's options, and conv2d's with a one-row window
  };
  std::mt19937_64 rng(17);
  for (const Pair& c : {Pair{"kernel: 3", "kernel: [1, 3]"}, Pair{"kernel: 3, padding: same", "kernel: [1, 3], padding: same"},
                        Pair{"kernel: 4, strides: 2, padding: same", "kernel: [1, 4], strides: [1, 2], padding: same"},
                        Pair{"kernel: 2, dilation: 3", "kernel: [1, 2], dilation: [1, 3]"},
                        Pair{"kernel: 1, use_bias: false", "kernel: 1, use_bias: false"},
                        Pair{"kernel: 5, strides: 3", "kernel: [1, 5], strides: [1, 3]"}})
    for (int threads : {1, 2, 3}) {
      INFO(c.one << ", " << threads << " threads");
      Net one_d(model("[13, 5]", std::string("{name: c, type: conv1d, filters: 7, ") + c.one + "}"), threads);
      Net two_d(model("[1, 13, 5]", std::string("{name: c, type: conv2d, filters: 7, ") + c.two + "}"), threads);
      two_d.copy_weights_from(one_d);
      const std::vector<float> x = randoms(3 * 13 * 5, rng);
      const int64_t steps = one_d.ex->graph().output_shape()[0];
      REQUIRE(two_d.ex->graph().output_shape() == Shape{1, steps, 7});
      const std::vector<float> dy = randoms(size_t(3 * steps * 7), rng);
      const auto a = one_d.run(x, Shape{3, 13, 5}, dy), b = two_d.run(x, Shape{3, 1, 13, 5}, dy);
      CHECK(a.first == b.first);
      CHECK(a.second == b.second);
    }
}

TEST_CASE("conv1d: causal padding equals zeros before the steps and a valid convolution, and output t sees only steps <= t") {
  std::mt19937_64 rng(29);
  struct Pair {
    const char *one, *two;  // conv1d's options, and the valid conv2d's with a one-row window
  };
  for (const Pair& c : {Pair{"kernel: 3", "kernel: [1, 3]"}, Pair{"kernel: 2, dilation: 3", "kernel: [1, 2], dilation: [1, 3]"},
                        Pair{"kernel: 4, strides: 2", "kernel: [1, 4], strides: [1, 2]"}, Pair{"kernel: 1", "kernel: 1"}})
    for (int threads : {1, 2, 3}) {
      INFO(c.one << ", " << threads << " threads");
      Net causal(model("[11, 3]", std::string("{name: c, type: conv1d, filters: 4, padding: causal, ") + c.one + "}"), threads);
      // The same convolution, padding 'valid', after (k - 1)·dilation zeros put before the steps by
      // a zero_pad2d on the one-row image.
      const Layer& l = *causal.ex->graph().nodes()[0].layer;
      const int64_t k = l.params()[0].shape[0], before = l.describe().integer("pad_before");
      CHECK(before == (k - 1) * l.describe().integer("dilation"));
      CHECK(l.describe().integer("pad_after") == 0);
      const std::string valid = std::string("{name: c, type: conv2d, filters: 4, ") + c.two + "}";
      Net padded("model:\n  input: [1, 11, 3]\n  layers:\n    - {name: pad, type: zero_pad2d, padding: [[0, 0], [" +
                     std::to_string(before) + ", 0]]}\n    - " + valid + "\n",
                 threads);
      padded.copy_weights_from(causal);
      const std::vector<float> x = randoms(2 * 11 * 3, rng);
      const int64_t steps = causal.ex->graph().output_shape()[0];
      CHECK(steps == (11 - 1) / l.describe().integer("strides") + 1);
      const std::vector<float> dy = randoms(size_t(2 * steps * 4), rng);
      const auto a = causal.run(x, Shape{2, 11, 3}, dy), b = padded.run(x, Shape{2, 1, 11, 3}, dy);
      REQUIRE(a.first.size() == b.first.size());
      for (size_t i = 0; i < a.first.size(); ++i) CHECK(a.first[i] == Approx(b.first[i]).margin(1e-5));
      REQUIRE(a.second.size() == b.second.size());
      for (size_t i = 0; i < a.second.size(); ++i) CHECK(a.second[i] == Approx(b.second[i]).margin(1e-4));
      // Causality: changing input step t0 changes no output before the first one whose window holds it.
      const int64_t stride = l.describe().integer("strides"), t0 = 6;
      std::vector<float> x2 = x;
      for (int64_t c = 0; c < 3; ++c) x2[size_t(t0 * 3 + c)] += 1.0f;  // sample 0, step t0
      const auto a2 = causal.run(x2, Shape{2, 11, 3}, dy);
      bool later_changed = false;
      for (int64_t t = 0; t < steps; ++t)
        for (int64_t f = 0; f < 4; ++f) {
          const size_t i = size_t(t * 4 + f);
          if (t * stride < t0) CHECK(a2.first[i] == a.first[i]);
          else later_changed |= a2.first[i] != a.first[i];
        }
      CHECK(later_changed);
    }
}

TEST_CASE("conv1d: every CPU fast path on equals every one off (two branches, a concat, a causal conv1d), 1-3 threads") {
  // On, the convolutions take our weight-gradient and 1x1 kernels (conv_wgrad, conv_1x1, on the
  // one-row images conv1d makes); off, oneDNN's.
  const std::string yaml = R"(
model:
  input: [12, 4]
  layers:
    - {name: a, type: conv1d, filters: 5, kernel: 3, padding: same, inputs: [input]}
    - {name: b, type: conv1d, filters: 3, kernel: 1, inputs: [input]}
    - {name: cat, type: concat, inputs: [a, b]}
    - {name: c, type: conv1d, filters: 4, kernel: 2, dilation: 2, padding: causal, activation: relu}
)";
  std::mt19937_64 rng(41);
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    Net fast(yaml, threads, FastPaths::all()), slow(yaml, threads, FastPaths::none());
    slow.copy_weights_from(fast);
    const std::vector<float> x = randoms(3 * 12 * 4, rng), dy = randoms(3 * 12 * 4, rng);
    const auto a = fast.run(x, Shape{3, 12, 4}, dy), b = slow.run(x, Shape{3, 12, 4}, dy);
    REQUIRE(a.first.size() == b.first.size());
    for (size_t i = 0; i < a.first.size(); ++i) CHECK(a.first[i] == Approx(b.first[i]).margin(1e-5));
    REQUIRE(a.second.size() == b.second.size());
    for (size_t i = 0; i < a.second.size(); ++i) CHECK(a.second[i] == Approx(b.second[i]).margin(1e-4));
  }
}

TEST_CASE("pool1d: max_pool1d and avg_pool1d bit-identical to their 2D forms on a one-row image, Keras's lengths, errors") {
  struct Pair {
    const char *one, *two;  // the 1D layer's options, the 2D one's with a one-row window
    int64_t steps;          // Keras's output length from 11 steps
  };
  std::mt19937_64 rng(53);
  for (const char* kind : {"max", "avg"})
    for (const Pair& c : {Pair{"", "pool: [1, 2]", 5}, Pair{"pool: 3", "pool: [1, 3]", 3},
                          Pair{"pool: 3, strides: 1", "pool: [1, 3], strides: 1", 9},
                          Pair{"pool: 2, padding: same", "pool: [1, 2], padding: same", 6},
                          Pair{"pool: 4, strides: 3, padding: same", "pool: [1, 4], strides: [1, 3], padding: same", 4}})
      for (int threads : {1, 2}) {
        INFO(kind << "_pool1d {" << c.one << "}, " << threads << " threads");
        // A conv1d first, so that the pool's input gradient is computed and reaches a parameter.
        const std::string conv = "{name: c, type: conv1d, filters: 3, kernel: 1}\n    - ";
        const std::string conv2 = "{name: c, type: conv2d, filters: 3, kernel: 1}\n    - ";
        Net one_d(model("[11, 2]", conv + "{name: p, type: " + kind + "_pool1d" + (*c.one ? ", " : "") + c.one + "}"), threads);
        Net two_d(model("[1, 11, 2]", conv2 + "{name: p, type: " + kind + "_pool2d, " + c.two + "}"), threads);
        REQUIRE(one_d.ex->graph().output_shape() == Shape{c.steps, 3});
        REQUIRE(two_d.ex->graph().output_shape() == Shape{1, c.steps, 3});
        two_d.copy_weights_from(one_d);
        const std::vector<float> x = randoms(3 * 11 * 2, rng), dy = randoms(size_t(3 * c.steps * 3), rng);
        const auto a = one_d.run(x, Shape{3, 11, 2}, dy), b = two_d.run(x, Shape{3, 1, 11, 2}, dy);
        CHECK(a.first == b.first);
        CHECK(a.second == b.second);
      }
  CHECK(find_layer("max_pool1d")->keras_name == "MaxPooling1D");
  CHECK(find_layer("avg_pool1d")->keras_name == "AveragePooling1D");
  CHECK_THAT(error_of(model("[8, 8, 3]", "{type: max_pool1d}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a sequence (steps, channels) input"));
  CHECK_THAT(error_of(model("[3, 2]", "{type: avg_pool1d, pool: 4}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("a window of 4 does not fit its 3 steps"));
  CHECK_THAT(error_of(model("[6, 2]", "{type: max_pool1d, pool: [2, 2]}")), Catch::StartsWith("test.yaml:4:"));
  CHECK_THAT(error_of(model("[6, 6, 2]", "{type: max_pool2d}")), Catch::StartsWith("no error"));
}
