// separable_conv2d layer (Keras SeparableConv2D): Keras's weights and fans, config errors, and outputs and gradients bit-identical to a depthwise_conv2d followed by a 1x1 conv2d.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;
using trainer::test::Net;
using trainer::test::randoms;

TEST_CASE("separable_conv2d: Keras's output shape, depthwise_kernel, pointwise_kernel and bias with Keras's fans, errors") {
  Graph g = build("model:\n  input: [9, 8, 3]\n  layers:\n"
                  "    - {name: s, type: separable_conv2d, filters: 5, kernel: 3, strides: 2, padding: same, depth_multiplier: 2}\n");
  CHECK(g.output_shape() == Shape{5, 4, 5});
  const auto ps = g.nodes()[0].layer->params();
  REQUIRE(ps.size() == 3);
  CHECK(ps[0].name == "depthwise_kernel");
  CHECK(ps[0].shape == Shape{3, 3, 3, 2});
  CHECK(ps[0].fan_in == 9 * 3);
  CHECK(ps[0].fan_out == 9 * 2);
  CHECK(ps[1].name == "pointwise_kernel");
  CHECK(ps[1].shape == Shape{1, 1, 6, 5});
  CHECK(ps[1].fan_in == 6);
  CHECK(ps[1].fan_out == 5);
  CHECK(ps[2].name == "bias");
  CHECK(ps[2].shape == Shape{5});
  CHECK(find_layer("separable_conv2d")->keras_name == "SeparableConv2D");
  CHECK(build("model:\n  input: [9, 8, 3]\n  layers:\n    - {type: separable_conv2d, filters: 4, kernel: 3, "
              "activation: relu, use_bias: false}\n").nodes().size() == 2);
  CHECK_THAT(error_of("model:\n  input: [9, 3]\n  layers:\n    - {type: separable_conv2d, filters: 4, kernel: 3}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs an image input"));
  CHECK_THAT(error_of("model:\n  input: [2, 2, 3]\n  layers:\n    - {type: separable_conv2d, filters: 4, kernel: 3}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("does not fit its 2x2 input"));
  CHECK_THAT(error_of("model:\n  input: [9, 9, 3]\n  layers:\n    - {type: separable_conv2d, filters: 4, kernel: 3, "
                      "strides: 2, dilation: 2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("strides > 1 with dilation > 1"));
}

TEST_CASE("separable_conv2d: bit-identical to depthwise_conv2d then a 1x1 conv2d, outputs and gradients, 1-3 threads") {
  struct Case {
    const char* window;  // the depthwise step's options, shared by both models
    int multiplier;
    bool bias;
  };
  std::mt19937_64 rng(61);
  for (const Case& c : {Case{"kernel: 3", 1, true}, Case{"kernel: 3, strides: 2, padding: same", 2, true},
                        Case{"kernel: [2, 3], dilation: 2, padding: same", 1, false}, Case{"kernel: 1", 3, true}})
    for (int threads : {1, 2, 3}) {
      INFO(c.window << ", multiplier " << c.multiplier << (c.bias ? "" : ", no bias") << ", " << threads << " threads");
      const std::string m = std::to_string(c.multiplier), bias = c.bias ? "true" : "false";
      Net sep("model:\n  input: [7, 9, 3]\n  layers:\n    - {name: s, type: separable_conv2d, filters: 4, " +
                  std::string(c.window) + ", depth_multiplier: " + m + ", use_bias: " + bias + "}\n",
              threads);
      Net two("model:\n  input: [7, 9, 3]\n  layers:\n    - {name: d, type: depthwise_conv2d, use_bias: false, " +
                  std::string(c.window) + ", depth_multiplier: " + m + "}\n    - {name: p, type: conv2d, filters: 4, kernel: 1, use_bias: " +
                  bias + "}\n",
              threads);
      two.copy_weights_from(sep);  // depthwise_kernel, pointwise_kernel (= p/kernel), bias: the same order
      const Shape out = sep.ex->graph().output_shape();
      REQUIRE(two.ex->graph().output_shape() == out);
      const std::vector<float> x = randoms(2 * 7 * 9 * 3, rng), dy = randoms(size_t(2 * out.numel()), rng);
      const auto a = sep.run(x, Shape{2, 7, 9, 3}, dy), b = two.run(x, Shape{2, 7, 9, 3}, dy);
      CHECK(a.first == b.first);
      CHECK(a.second == b.second);
    }
}
