// spatial_dropout1d and spatial_dropout2d layers (Keras SpatialDropout1D/2D): shapes, errors at file:line:col, and in a graph whole channels kept (scaled) or dropped at every position, the same mask in backward, the identity in inference.
#include <catch2/catch.hpp>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("spatial_dropout1d, spatial_dropout2d: Keras's names and shapes, a sequence or an image input, errors") {
  CHECK(build("model:\n  input: [7, 3]\n  layers:\n    - {type: spatial_dropout1d, rate: 0.2}\n").output_shape() == Shape{7, 3});
  CHECK(build("model:\n  input: [4, 5, 3]\n  layers:\n    - {type: spatial_dropout2d, rate: 0.2}\n").output_shape() == Shape{4, 5, 3});
  CHECK(find_layer("spatial_dropout1d")->keras_name == "SpatialDropout1D");
  CHECK(find_layer("spatial_dropout2d")->keras_name == "SpatialDropout2D");
  CHECK_THAT(error_of("model:\n  input: [4, 5, 3]\n  layers:\n    - {type: spatial_dropout1d, rate: 0.2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a sequence (steps, channels) input"));
  CHECK_THAT(error_of("model:\n  input: [7, 3]\n  layers:\n    - {type: spatial_dropout2d, rate: 0.2}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs an image (H, W, C) input"));
  CHECK_THAT(error_of("model:\n  input: [7, 3]\n  layers:\n    - {type: spatial_dropout1d}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'rate'"));
  CHECK_THAT(error_of("model:\n  input: [7, 3]\n  layers:\n    - {type: spatial_dropout1d, rate: 1}\n"),
             Catch::StartsWith("test.yaml:4:39:") && Catch::Contains("between 0 and 0.999"));
}

TEST_CASE("spatial_dropout1d, spatial_dropout2d: in a graph, each channel kept (x / (1 - rate)) or dropped at every position, "
          "its gradient alike, the identity in inference") {
  struct Case {
    const char* yaml;
    Shape input;
  };
  for (const Case& k : {Case{"model:\n  input: [6, 2]\n  layers:\n    - {name: c, type: conv1d, filters: 8, kernel: 1}\n"
                             "    - {name: s, type: spatial_dropout1d, rate: 0.5}\n",
                             Shape{3, 6, 2}},
                        Case{"model:\n  input: [3, 4, 2]\n  layers:\n    - {name: c, type: conv2d, filters: 8, kernel: 1}\n"
                             "    - {name: s, type: spatial_dropout2d, rate: 0.5}\n",
                             Shape{3, 3, 4, 2}}}) {
    INFO(k.yaml);
    trainer::test::Probe p(k.yaml, k.input);
    const Tensor &cy = p.out("c"), &sy = p.out("s");
    const int64_t N = 3, C = 8, P = cy.numel() / (N * C);
    std::vector<int> kept(size_t(N * C), -1);  // per (n, c): 1 kept, 0 dropped, -1 not yet seen
    int dropped = 0, whole = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        bool all_kept = true, all_dropped = true;
        for (int64_t q = 0; q < P; ++q) {
          const int64_t i = (n * P + q) * C + c;
          all_kept = all_kept && sy.f32()[i] == cy.f32()[i] * 2.0f;
          all_dropped = all_dropped && sy.f32()[i] == 0.0f;
        }
        whole += all_kept != all_dropped;  // exactly one of the two holds at every position
        dropped += all_dropped;
        kept[size_t(n * C + c)] = all_kept ? 1 : 0;
      }
    CHECK(whole == N * C);
    CHECK(dropped > 0);
    CHECK(dropped < N * C);
    p.backward("s", "c");
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < P; ++q)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = (n * P + q) * C + c;
          CHECK(p.grad_at[size_t(i)] == (kept[size_t(n * C + c)] ? p.dy[size_t(i)] * 2.0f : 0.0f));
        }
    p.ex->forward(p.x, false);
    const Tensor &cy2 = p.out("c"), &sy2 = p.out("s");
    for (int64_t i = 0; i < sy2.numel(); ++i) REQUIRE(sy2.f32()[i] == cy2.f32()[i]);
  }
}
