// zero_pad1d, cropping1d, up_sampling1d and repeat_vector layers (Keras ZeroPadding1D, Cropping1D, UpSampling1D, RepeatVector): output shapes, config errors at file:line:col, and in a graph each step's value and the gradient that reaches the layer before.
#include <catch2/catch.hpp>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {
Shape out_of(const std::string& layer) {
  return build("model:\n  input: [7, 3]\n  layers:\n    - {" + layer + "}\n").output_shape();
}
}  // namespace

TEST_CASE("zero_pad1d, cropping1d, up_sampling1d: Keras's defaults and forms, a sequence input, errors") {
  CHECK(out_of("type: zero_pad1d") == Shape{9, 3});  // Keras: padding=1
  CHECK(out_of("type: zero_pad1d, padding: [2, 0]") == Shape{9, 3});
  CHECK(out_of("type: cropping1d") == Shape{5, 3});  // Keras: cropping=(1, 1)
  CHECK(out_of("type: cropping1d, cropping: [0, 4]") == Shape{3, 3});
  CHECK(out_of("type: up_sampling1d") == Shape{14, 3});  // Keras: size=2
  CHECK(out_of("type: up_sampling1d, size: 3") == Shape{21, 3});
  CHECK(find_layer("zero_pad1d")->keras_name == "ZeroPadding1D");
  CHECK(find_layer("cropping1d")->keras_name == "Cropping1D");
  CHECK(find_layer("up_sampling1d")->keras_name == "UpSampling1D");
  const std::string head = "model:\n  input: [7, 3]\n  layers:\n    - {type: ";
  CHECK_THAT(error_of(head + "cropping1d, cropping: [4, 3]}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("leaves nothing of its 7 steps"));
  CHECK_THAT(error_of(head + "zero_pad1d, padding: [1, -2]}\n"),
             Catch::StartsWith("test.yaml:4:39:") && Catch::Contains("must not be negative"));
  CHECK_THAT(error_of(head + "zero_pad1d, padding: [1, 2, 3]}\n"),
             Catch::StartsWith("test.yaml:4:35:") && Catch::Contains("one integer or [before, after]"));
  CHECK_THAT(error_of(head + "up_sampling1d, size: 0}\n"), Catch::StartsWith("test.yaml:4:35:") && Catch::Contains("between 1 and 1024"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: up_sampling1d}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a sequence input"));
}

TEST_CASE("zero_pad1d, cropping1d, up_sampling1d: in a graph, each step's value, and the gradient reaching the conv1d before") {
  const std::string head = "model:\n  input: [6, 2]\n  layers:\n    - {name: c, type: conv1d, filters: 3, kernel: 1}\n";
  const int64_t T = 6, C = 3;
  struct Case {
    const char* layer;
    int64_t steps;
    // The input step an output step reads (-1: a zero), for the value and (summed) for the gradient.
    int64_t (*source)(int64_t);
  };
  for (const Case& k : {Case{"{name: s, type: zero_pad1d, padding: [2, 1]}", 9, [](int64_t t) { return t >= 2 && t < 8 ? t - 2 : int64_t(-1); }},
                        Case{"{name: s, type: cropping1d, cropping: [1, 2]}", 3, [](int64_t t) { return t + 1; }},
                        Case{"{name: s, type: up_sampling1d, size: 3}", 18, [](int64_t t) { return t / 3; }}}) {
    INFO(k.layer);
    trainer::test::Probe p(head + "    - " + k.layer + "\n", Shape{2, T, 2});
    const Tensor &cy = p.out("c"), &sy = p.out("s");
    REQUIRE(sy.shape() == Shape{2, k.steps, C});
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t t = 0; t < k.steps; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t s = k.source(t);
          CHECK(sy.f32()[(n * k.steps + t) * C + c] == (s < 0 ? 0.0f : cy.f32()[(n * T + s) * C + c]));
        }
    p.backward("s", "c");
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t s = 0; s < T; ++s)
        for (int64_t c = 0; c < C; ++c) {
          float want = 0.0f;
          for (int64_t t = 0; t < k.steps; ++t)
            if (k.source(t) == s) want += p.dy[size_t((n * k.steps + t) * C + c)];
          CHECK(p.grad_at[size_t((n * T + s) * C + c)] == want);
        }
  }
}

TEST_CASE("repeat_vector: Keras's RepeatVector(n) of a vector, errors, and in a graph each copy's value and the summed gradient") {
  const auto shape = [](const std::string& input, const std::string& layer) {
    return build("model:\n  input: " + input + "\n  layers:\n    - {" + layer + "}\n").output_shape();
  };
  CHECK(shape("[5]", "type: repeat_vector, n: 3") == Shape{3, 5});
  CHECK(shape("[1]", "type: repeat_vector, n: 1") == Shape{1, 1});
  CHECK(find_layer("repeat_vector")->keras_name == "RepeatVector");
  CHECK_THAT(error_of("model:\n  input: [5]\n  layers:\n    - {type: repeat_vector}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'n'"));
  CHECK_THAT(error_of("model:\n  input: [5]\n  layers:\n    - {type: repeat_vector, n: 0}\n"), Catch::StartsWith("test.yaml:4:32:") && Catch::Contains("between 1 and"));
  CHECK_THAT(error_of("model:\n  input: [7, 3]\n  layers:\n    - {type: repeat_vector, n: 2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a vector input"));
  // An encoder's summary (a dense of 3) fed to 4 steps; the gradient reaching it sums the copies'.
  const int64_t n = 4, C = 3;
  trainer::test::Probe p("model:\n  input: [5]\n  layers:\n    - {name: d, type: dense, units: 3}\n"
                         "    - {name: r, type: repeat_vector, n: 4}\n",
                         Shape{2, 5});
  const Tensor &dy_ = p.out("d"), &ry = p.out("r");
  REQUIRE(ry.shape() == Shape{2, n, C});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < C; ++c) CHECK(ry.f32()[(b * n + t) * C + c] == dy_.f32()[b * C + c]);
  p.backward("r", "d");
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < C; ++c) {
      float want = 0.0f;
      for (int64_t t = 0; t < n; ++t) want += p.dy[size_t((b * n + t) * C + c)];
      CHECK(p.grad_at[size_t(b * C + c)] == want);
    }
}
