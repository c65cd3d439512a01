// The single-device step: loss decreases on a learnable set, and training is bit-for-bit
// deterministic for a fixed seed.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/optim/schedule.h"
#include "smoke_train.h"

using namespace trainer;

namespace {

RunSpec smoke() {
  return load_run_spec(TRAINER_SOURCE_DIR "/configs/smoke.yaml", {"model.layers.4.filters=24"});
}

std::vector<float> train(int steps, std::vector<double>* losses = nullptr) {
  RunSpec e = smoke();
  Replica rep(trainee_spec(e), Device::cpu(), 2);
  test::train_steps(e, rep, steps, 0.02f, losses);
  return rep.executor().params().download(rep.context());
}

}  // namespace

TEST_CASE("training: loss falls on the synthetic set") {
  std::vector<double> losses;
  train(60, &losses);
  double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[57] + losses[58] + losses[59]) / 3;
  INFO("first " << first << ", last " << last);
  CHECK(last < 0.8 * first);
}

TEST_CASE("training: two runs with one seed give bit-identical weights") {
  std::vector<float> a = train(15), b = train(15);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("training: after the first steps a step allocates no tensor (MiniGoogLeNet: every layer kind it has)") {
  // Activations, gradients, kernel plans and scratch are sized on the first steps; later steps of
  // the same batch size must reuse them: no allocate() call at all, not even one the allocator's
  // cache would serve.
  RunSpec e = load_run_spec(TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml", {});
  Replica rep(trainee_spec(e), Device::cpu(), 2);
  Tensor x = Tensor::empty(Shape{8, 32, 32, 3}), y = Tensor::empty(Shape{8}, DType::I32);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float((i * 7919) % 255) / 255.f - 0.5f;
  for (int i = 0; i < 8; ++i) y.i32()[i] = i % 10;
  for (int s = 0; s < 2; ++s) rep.train_step(x, y, 0.01f, uint64_t(s));
  const size_t before = host_allocator().allocations(), system_before = host_allocator().system_allocations();
  for (int s = 2; s < 6; ++s) rep.train_step(x, y, 0.01f, uint64_t(s));
  CHECK(host_allocator().allocations() - before == 0);
  CHECK(host_allocator().system_allocations() - system_before == 0);
}
