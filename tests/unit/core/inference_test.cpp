// InferenceModel (trainer predict, generate): a model of the run's graph without Adam's slots or the moving average, whose logits are the training replica's.
#include <catch2/catch.hpp>

#include <random>

#include "core/io/config.h"
#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/inference.h"

using namespace trainer;

namespace {

const char* kAdamEma = R"(
model:
  input: [6]
  layers:
    - {name: hidden, type: dense, units: 7}
    - {name: relu, type: relu}
    - {name: out, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 8, image_size: 6, classes: 3}
optimizer: {type: adam, lr: 0.01}
train: {ema: {decay: 0.9}}
)";

}  // namespace

TEST_CASE("inference: the model holds no Adam slots and no moving average (plain SGD's velocity only), and its "
          "logits are the training replica's for the same weights") {
  const RunSpec e = read_run_spec(cfg::parse_document(kAdamEma, "inference.yaml", {}));
  const TraineeSpec t = trainee_spec(e);
  REQUIRE(t.average.enabled());
  Replica trained(t, Device::cpu(0), 1);
  REQUIRE(trained.state().optimizer_state_names().size() == 2);  // Adam's m and v: what inference leaves out
  REQUIRE(trained.state().has_average());
  InferenceModel model(t, Device::cpu(0), 1);
  CHECK(model.state().optimizer_state_names() == std::vector<std::string>{"momentum"});
  CHECK_FALSE(model.state().has_average());

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w = trained.state().download_weights();
  for (float& x : w) x = u(rng);
  trained.state().upload_weights(w);
  model.state().upload_weights(w);
  Tensor x = Tensor::empty({4, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = u(rng);
  std::vector<float> want, got;
  trained.logits(x, want);
  model.logits(x, got);
  REQUIRE(want.size() == 12);
  CHECK(got == want);
}
