// GPU against CPU: configs/smoke.yaml trained 10 steps on each (strict fp32) ends with the same weights within 1e-4.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "smoke_train.h"
#include "test_devices.h"

using namespace trainer;

namespace {

// configs/smoke.yaml (conv, batch norm, relu, max pool, global average pool, dense, softmax; Adam)
// trained for `steps` steps on `device` with strict fp32 (devices.tf32: false: no TF32 tensor cores
// on the GPU); returns every parameter, and the names and offsets of the trainable tensors.
struct Trained {
  std::vector<float> weights;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> tensors;  // name, (offset, count)
};

Trained train(Device device, int threads, int steps) {
  RunSpec e = load_run_spec(TRAINER_SOURCE_DIR "/configs/smoke.yaml", {"devices.tf32=false"});
  Replica rep(trainee_spec(e), device, threads);
  test::train_steps(e, rep, steps, 0.01f);
  Trained t;
  t.weights = rep.executor().params().download(rep.context());
  for (const ParamEntry& p : rep.executor().params().entries())
    if (p.spec.trainable) t.tensors.push_back({p.name, {p.offset, p.spec.shape.numel()}});
  return t;
}

// Per parameter tensor, ‖a - b‖ / ‖b‖ (Euclidean); returns the largest.
double compare(const Trained& a, const Trained& b, double bound) {
  REQUIRE(a.weights.size() == b.weights.size());
  double worst = 0;
  for (const auto& [name, range] : b.tensors) {
    double d = 0, s = 0;
    for (int64_t i = range.first; i < range.first + range.second; ++i) {
      const double x = a.weights[size_t(i)], y = b.weights[size_t(i)];
      d += (x - y) * (x - y), s += y * y;
    }
    const double rel = std::sqrt(d / std::max(s, 1e-300));
    INFO(name << ": relative difference " << rel << ", bound " << bound);
    CHECK(rel <= bound);
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace

TEST_CASE("gpu vs cpu: 10 steps of smoke.yaml in strict fp32 give weights within 1e-4 relative, per tensor") {
  const test::TestDevice* gpu = test::test_gpu();  // a skip where no GPU can run
  if (!gpu) return;
  // Calibration on the CPU: one and two compute threads round differently (oneDNN splits its
  // reductions by thread), so this is how far rounding-level differences carry over 10 Adam steps.
  const Trained one = train(Device::cpu(0), 1, 10), two = train(Device::cpu(0), 2, 10);
  const double cpu_spread = compare(one, two, 1e-4);
  WARN("cpu, 1 vs 2 threads after 10 steps: largest relative difference per tensor " << cpu_spread);
  const Trained g = train(gpu->device, 0, 10);
  const double gpu_diff = compare(g, two, 1e-4);
  WARN(gpu->name << " vs cpu after 10 steps: largest relative difference per tensor " << gpu_diff);
}
