// gaussian_noise and gaussian_dropout layers (Keras GaussianNoise, GaussianDropout): names, shapes, errors at file:line:col, and in a graph the noise of training (its moments), the gradient (dy, or dy times the forward's factor), the identity in inference, fresh noise each step.
#include <catch2/catch.hpp>

#include <cmath>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("gaussian_noise, gaussian_dropout: Keras's names, any input shape, errors") {
  CHECK(build("model:\n  input: [7, 3]\n  layers:\n    - {type: gaussian_noise, stddev: 0.1}\n").output_shape() == Shape{7, 3});
  CHECK(build("model:\n  input: [4, 5, 3]\n  layers:\n    - {type: gaussian_dropout, rate: 0.2}\n").output_shape() == Shape{4, 5, 3});
  CHECK(find_layer("gaussian_noise")->keras_name == "GaussianNoise");
  CHECK(find_layer("gaussian_dropout")->keras_name == "GaussianDropout");
  CHECK_THAT(error_of("model:\n  input: [7]\n  layers:\n    - {type: gaussian_noise}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'stddev'"));
  CHECK_THAT(error_of("model:\n  input: [7]\n  layers:\n    - {type: gaussian_noise, stddev: -1}\n"),
             Catch::StartsWith("test.yaml:4:38:") && Catch::Contains("between 0 and"));
  CHECK_THAT(error_of("model:\n  input: [7]\n  layers:\n    - {type: gaussian_dropout, rate: 1}\n"),
             Catch::StartsWith("test.yaml:4:38:") && Catch::Contains("between 0 and 0.999"));
}

TEST_CASE("gaussian_noise, gaussian_dropout: in a graph, the noise's moments in training, the gradient, the identity in inference") {
  for (bool mult : {false, true}) {
    INFO((mult ? "gaussian_dropout rate 0.2" : "gaussian_noise stddev 0.3"));
    const std::string yaml = std::string("model:\n  input: [40, 8]\n  layers:\n    - {name: c, type: conv1d, filters: 16, kernel: 1}\n") +
                             (mult ? "    - {name: s, type: gaussian_dropout, rate: 0.2}\n" : "    - {name: s, type: gaussian_noise, stddev: 0.3}\n");
    const double sd = mult ? std::sqrt(0.2 / 0.8) : 0.3;
    trainer::test::Probe p(yaml, Shape{8, 40, 8});
    const Tensor &cy = p.out("c"), &sy = p.out("s");
    // The noise in units of stddev: (y - x) / sd, or (y / x - 1) / sd where x is not tiny.
    double m = 0, v = 0;
    int64_t count = 0;
    std::vector<double> z;
    for (int64_t i = 0; i < sy.numel(); ++i) {
      const double x = cy.f32()[i], y = sy.f32()[i];
      if (mult && std::fabs(x) < 1e-2) continue;
      z.push_back(mult ? (y / x - 1.0) / sd : (y - x) / sd);
    }
    for (double e : z) m += e;
    m /= double(z.size());
    for (double e : z) v += (e - m) * (e - m);
    v /= double(z.size());
    count = int64_t(z.size());
    CHECK(count > 4000);
    CHECK(std::fabs(m) < 5.0 / std::sqrt(double(count)));
    CHECK(std::fabs(v - 1.0) < 0.1);
    p.backward("s", "c");
    for (int64_t i = 0; i < sy.numel(); ++i) {
      const double x = cy.f32()[i], y = sy.f32()[i], g = p.dy[size_t(i)];
      if (!mult) REQUIRE(p.grad_at[size_t(i)] == float(g));  // additive: dy through
      else if (std::fabs(x) > 1e-2) REQUIRE(p.grad_at[size_t(i)] == Approx(g * y / x).epsilon(1e-4).margin(1e-6));
    }
    // Inference: the identity. Training again: another step's noise.
    std::vector<float> first(sy.f32(), sy.f32() + sy.numel());
    p.ex->forward(p.x, false);
    for (int64_t i = 0; i < p.out("s").numel(); ++i) REQUIRE(p.out("s").f32()[i] == p.out("c").f32()[i]);
    p.ex->set_step_seed(12345);
    p.ex->forward(p.x, true);
    int64_t same = 0;
    for (int64_t i = 0; i < p.out("s").numel(); ++i) same += p.out("s").f32()[i] == first[size_t(i)];
    CHECK(same < p.out("s").numel() / 100);
  }
}
