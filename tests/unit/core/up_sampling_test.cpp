// up_sampling2d layer (Keras UpSampling2D, nearest; bilinear's values: tests/unit/ops/upsample_test.cpp): output shapes, config errors, and in a graph each pixel's block and the summed gradient.
#include <catch2/catch.hpp>

#include <random>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("up_sampling2d: Keras's size (an int or [rows, columns]), nearest or bilinear, an image input") {
  const std::string in = "model:\n  input: [3, 5, 2]\n  layers:\n    - {type: up_sampling2d";
  CHECK(build(in + "}\n").output_shape() == Shape{6, 10, 2});  // Keras's default size (2, 2)
  CHECK(build(in + ", size: 3}\n").output_shape() == Shape{9, 15, 2});
  CHECK(build(in + ", size: [1, 4], interpolation: nearest}\n").output_shape() == Shape{3, 20, 2});
  CHECK(find_layer("up_sampling2d")->keras_name == "UpSampling2D");
  CHECK(build(in + ", size: 2, interpolation: bilinear}\n").output_shape() == Shape{6, 10, 2});
  CHECK_THAT(error_of(in + ", interpolation: bicubic}\n"),
             Catch::StartsWith("test.yaml:4:44:") && Catch::Contains("'bicubic' is not a valid interpolation"));
  CHECK_THAT(error_of(in + ", size: 0}\n"), Catch::StartsWith("test.yaml:4:35:") && Catch::Contains("must be positive"));
  CHECK_THAT(error_of(in + ", size: [2, 2000]}\n"), Catch::StartsWith("test.yaml:4:35:") && Catch::Contains("between 1 and 1024"));
  CHECK_THAT(error_of("model:\n  input: [6, 4]\n  layers:\n    - {type: up_sampling2d}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs an image input"));
}

TEST_CASE("up_sampling2d: in a graph, each output pixel is its source's and the gradient reaching a conv2d is the block sum") {
  trainer::test::Probe p("model:\n  input: [3, 4, 2]\n  layers:\n    - {name: c, type: conv2d, filters: 2, kernel: 1}\n"
                         "    - {name: up, type: up_sampling2d, size: [2, 3]}\n",
                         Shape{2, 3, 4, 2});
  const Tensor &cy = p.out("c"), &uy = p.out("up");
  REQUIRE(uy.shape() == Shape{2, 6, 12, 2});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 12; ++j)
        for (int64_t k = 0; k < 2; ++k)
          CHECK(uy.f32()[((n * 6 + i) * 12 + j) * 2 + k] == cy.f32()[((n * 3 + i / 2) * 4 + j / 3) * 2 + k]);
  p.backward("up", "c");
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 2; ++k) {
          float s = 0.0f;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 3; ++b) s += p.dy[size_t(((n * 6 + i * 2 + a) * 12 + j * 3 + b) * 2 + k)];
          CHECK(p.grad_at[size_t(((n * 3 + i) * 4 + j) * 2 + k)] == s);
        }
}
