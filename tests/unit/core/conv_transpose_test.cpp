// conv2d_transpose layer (Keras Conv2DTranspose): Keras's output shapes, kernel layout and fans, config errors at file:line:col, and training bit-identical at 1-3 threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;
using trainer::test::Net;
using trainer::test::randoms;

namespace {
Shape out_of(const std::string& input, const std::string& layer) {
  return build("model:\n  input: " + input + "\n  layers:\n    - {type: conv2d_transpose, " + layer + "}\n").output_shape();
}
}  // namespace

TEST_CASE("conv2d_transpose: Keras's output shapes (deconv_output_length), with and without output_padding") {
  // Keras 3: Conv2DTranspose(f, k, strides, padding, output_padding)(Input((h, w, c))).shape
  CHECK(out_of("[8, 8, 3]", "filters: 16, kernel: 3, strides: 2, padding: same") == Shape{16, 16, 16});
  CHECK(out_of("[8, 8, 3]", "filters: 16, kernel: 3, strides: 2") == Shape{17, 17, 16});      // valid: in·s + max(k - s, 0)
  CHECK(out_of("[7, 5, 3]", "filters: 2, kernel: 1, strides: 3") == Shape{21, 15, 2});        // k < s: in·s
  CHECK(out_of("[7, 5, 3]", "filters: 2, kernel: 1, strides: 3, output_padding: 0") == Shape{19, 13, 2});  // (in - 1)·s + k
  CHECK(out_of("[8, 8, 3]", "filters: 4, kernel: 4, strides: 2, padding: same, output_padding: 1") == Shape{15, 15, 4});
  CHECK(out_of("[5, 6, 2]", "filters: 4, kernel: [3, 2], strides: [1, 2]") == Shape{7, 12, 4});
  CHECK(out_of("[5, 6, 2]", "filters: 4, kernel: 3, dilation: 2, padding: same") == Shape{5, 6, 4});
  CHECK(out_of("[5, 6, 2]", "filters: 4, kernel: 3, dilation: 2") == Shape{9, 10, 4});  // k_eff = 5
  CHECK(out_of("[4, 4, 2]", "filters: 1, kernel: 3, output_padding: null") == Shape{6, 6, 1});
}

TEST_CASE("conv2d_transpose: Keras's kernel [kh, kw, filters, in] and bias, with Keras's fans, and its config errors") {
  Graph g = build("model:\n  input: [9, 8, 3]\n  layers:\n"
                  "    - {name: t, type: conv2d_transpose, filters: 5, kernel: [3, 2], strides: 2, padding: same}\n");
  const auto ps = g.nodes()[0].layer->params();
  REQUIRE(ps.size() == 2);
  CHECK(ps[0].name == "kernel");
  CHECK(ps[0].shape == Shape{3, 2, 5, 3});
  CHECK(ps[0].fan_in == 6 * 5);  // compute_fans: receptive field · shape[-2]
  CHECK(ps[0].fan_out == 6 * 3);
  CHECK(ps[1].name == "bias");
  CHECK(ps[1].shape == Shape{5});
  CHECK(find_layer("conv2d_transpose")->keras_name == "Conv2DTranspose");
  CHECK(build("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: conv2d_transpose, filters: 2, kernel: 3, "
              "use_bias: false, activation: sigmoid}\n").nodes().size() == 2);
  const std::string head = "model:\n  input: [4, 4, 3]\n  layers:\n    - {type: conv2d_transpose, filters: 2, kernel: 3";
  CHECK_THAT(error_of(head + ", strides: 2, output_padding: 2}\n"),
             Catch::StartsWith("test.yaml:4:83:") && Catch::Contains("less than the strides 2x2"));
  CHECK_THAT(error_of(head + ", output_padding: [0, -1]}\n"),
             Catch::StartsWith("test.yaml:4:71:") && Catch::Contains("at least 0"));
  CHECK_THAT(error_of(head + ", strides: 2, dilation: 2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("strides > 1 with dilation > 1"));
  CHECK_THAT(error_of(head + ", filtrs: 2}\n"), Catch::Contains("unknown key 'filtrs'"));
  CHECK_THAT(error_of("model:\n  input: [4, 3]\n  layers:\n    - {type: conv2d_transpose, filters: 2, kernel: 3}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs an image input"));
  // An even kernel, 'same' and output_padding 0: a (in - 1)·2 output that its convolution does not
  // map back onto the input (TensorFlow refuses the shape too).
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: conv2d_transpose, filters: 2, kernel: 2, "
                      "strides: 2, padding: same, output_padding: 0}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("does not map back"));
}

TEST_CASE("conv2d_transpose: a training step is the same bits from run to run at 1, 2 and 3 threads, and across thread counts within f32 rounding") {
  // The weight gradient's sums are split between threads (oneDNN's, and our own kernel's, as for
  // conv2d: tried with conv2d in this test's place, the same), so across thread counts the bits of
  // dw may differ in the last places; the output and, at one thread count, everything may not.
  const std::string yaml = "model:\n  input: [5, 7, 6]\n  layers:\n"
                           "    - {name: t, type: conv2d_transpose, filters: 9, kernel: 3, strides: 2, padding: same}\n"
                           "    - {name: u, type: conv2d_transpose, filters: 4, kernel: 1, strides: [3, 2]}\n";
  std::mt19937_64 rng(83);
  Net one(yaml, 1);
  const Shape out = one.ex->graph().output_shape();
  const std::vector<float> x = randoms(3 * 5 * 7 * 6, rng), dy = randoms(size_t(3 * out.numel()), rng);
  const auto want = one.run(x, Shape{3, 5, 7, 6}, dy);
  float largest = 0;
  for (float g : want.second) largest = std::max(largest, std::fabs(g));
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    Net a(yaml, threads), b(yaml, threads);
    a.copy_weights_from(one);
    b.copy_weights_from(one);
    const auto got = a.run(x, Shape{3, 5, 7, 6}, dy), again = b.run(x, Shape{3, 5, 7, 6}, dy);
    CHECK(got.first == again.first);
    CHECK(got.second == again.second);
    CHECK(got.first == want.first);
    REQUIRE(got.second.size() == want.second.size());
    // A closeness check, not a derived bound: the sums' order changes the last places only (their
    // values are checked against float64 within derived bounds by the op tests, bf16_test.cpp).
    for (size_t i = 0; i < want.second.size(); ++i) CHECK(std::fabs(got.second[i] - want.second[i]) <= 1e-5f * largest);
  }
}
