// cropping2d layer (Keras Cropping2D): Keras's three forms of `cropping`, config errors, and in a graph the interior forward and the zero-padded gradient backward.
#include <catch2/catch.hpp>

#include <random>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("cropping2d: Keras's forms (an int, [rows, columns], [[top, bottom], [left, right]]), default 0, errors") {
  const std::string in = "model:\n  input: [7, 9, 2]\n  layers:\n    - {type: cropping2d";
  CHECK(build(in + "}\n").output_shape() == Shape{7, 9, 2});
  CHECK(build(in + ", cropping: 1}\n").output_shape() == Shape{5, 7, 2});
  CHECK(build(in + ", cropping: [2, 3]}\n").output_shape() == Shape{3, 3, 2});
  CHECK(build(in + ", cropping: [[0, 3], [4, 1]]}\n").output_shape() == Shape{4, 4, 2});
  CHECK(find_layer("cropping2d")->keras_name == "Cropping2D");
  CHECK_THAT(error_of(in + ", cropping: [[4, 3], [0, 0]]}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("leaves nothing of its 7x9 input"));
  CHECK_THAT(error_of(in + ", cropping: -1}\n"), Catch::StartsWith("test.yaml:4:36:") && Catch::Contains("must not be negative"));
  CHECK_THAT(error_of(in + ", cropping: [1, 2, 3]}\n"), Catch::StartsWith("test.yaml:4:36:") && Catch::Contains("[[top, bottom], [left, right]]"));
  CHECK_THAT(error_of("model:\n  input: [6, 4]\n  layers:\n    - {type: cropping2d}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs an image input"));
}

TEST_CASE("cropping2d: in a graph, the output is the input's interior and the gradient reaching a conv2d is dy with zeros around") {
  trainer::test::Probe p("model:\n  input: [5, 6, 2]\n  layers:\n    - {name: c, type: conv2d, filters: 3, kernel: 1}\n"
                         "    - {name: crop, type: cropping2d, cropping: [[1, 2], [0, 3]]}\n",
                         Shape{2, 5, 6, 2});
  const Tensor &cy = p.out("c"), &y = p.out("crop");
  REQUIRE(y.shape() == Shape{2, 2, 3, 3});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 3; ++k)
          CHECK(y.f32()[((n * 2 + i) * 3 + j) * 3 + k] == cy.f32()[((n * 5 + i + 1) * 6 + j) * 3 + k]);
  p.backward("crop", "c");
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t k = 0; k < 3; ++k) {
          const bool inside = i >= 1 && i < 3 && j < 3;
          const float want = inside ? p.dy[size_t(((n * 2 + i - 1) * 3 + j) * 3 + k)] : 0.0f;
          CHECK(p.grad_at[size_t(((n * 5 + i) * 6 + j) * 3 + k)] == want);
        }
}
