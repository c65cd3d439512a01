// Mixed precision end to end on one replica of every device (bf16; fp16 on a GPU): the smoke CNN (two convolutions, batch norm, dense) trains like fp32.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "smoke_train.h"
#include "test_devices.h"

using namespace trainer;

namespace {

// The per-step mean losses of `steps` training steps of configs/smoke.yaml at `precision` on
// `device` (strict fp32 on a GPU: no TF32), with a fixed seed and batch order (so the precisions
// see the same data in the same order).
std::vector<double> losses(Device device, const std::string& precision, int steps) {
  RunSpec e =
      load_run_spec(TRAINER_SOURCE_DIR "/configs/smoke.yaml", {"precision=" + precision, "devices.tf32=false"});
  REQUIRE(precision_name(e.precision) == precision);
  Replica rep(trainee_spec(e), device, device.is_cpu() ? 2 : 0);
  std::vector<double> out;
  test::train_steps(e, rep, steps, 0.01f, &out);
  return out;
}

double mean(const std::vector<double>& v, size_t from, size_t n) {
  double s = 0;
  for (size_t i = from; i < from + n; ++i) s += v[i];
  return s / double(n);
}

}  // namespace

TEST_CASE("mixed-precision training: the smoke CNN's losses stay within 2^-5 of fp32's, step by step", "[backends]") {
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    const int steps = 40;
    std::vector<double> f = losses(mc.device(), "fp32", steps), h = losses(mc.device(), precision_name(mc.precision), steps);
    // Step 0 is before any update: the same weights and batch, so the losses differ only by the
    // rounding of the convolutions' and the dense layer's operands to bf16 (f16: 11 bits, closer).
    // No loss scaling is involved (Replica::train_step): at this scale fp16's gradients neither
    // overflow nor flush enough to matter. Each output of those is
    // off by at most 2^-7 of its sum of |terms| (see tests/unit/ops/bf16_test.cpp), batch norm
    // renormalises the convolutions' outputs, and the loss moves by at most |dloss/dlogit| <= 1 per
    // logit error: within 2^-7 of itself (about ln 10 = 2.3 here).
    INFO("step 0: fp32 " << f[0] << ", bf16 " << h[0]);
    CHECK(std::fabs(h[0] - f[0]) <= 0x1p-7 * f[0]);
    // Later steps add each step's rounding of the gradients (again relative 2^-7 at worst, far less
    // on average) to the weights, and the trajectories drift apart slowly: over these 40 Adam steps
    // by a few 2^-8 at most (3.5e-3 measured). 2^-5 leaves that room eight times over, while a wrong
    // gradient moves the losses further within a few steps (convolution weight gradients permuted:
    // 7% at step 2). A gradient off by a constant factor does not show here, Adam being invariant to
    // it; the op tests in tests/unit/ops/bf16_test.cpp check the values themselves.
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s << ": fp32 " << f[size_t(s)] << ", bf16 " << h[size_t(s)]);
      CHECK(std::fabs(h[size_t(s)] - f[size_t(s)]) <= 0x1p-5 * f[size_t(s)]);
    }
    // And both learn: the mean loss of the last 5 steps is well below that of the first 5.
    double f_first = mean(f, 0, 5), f_last = mean(f, steps - 5, 5);
    double h_first = mean(h, 0, 5), h_last = mean(h, steps - 5, 5);
    INFO("fp32 " << f_first << " -> " << f_last << ", bf16 " << h_first << " -> " << h_last);
    CHECK(f_last < 0.8 * f_first);
    CHECK(h_last < 0.8 * h_first);
  }
}
