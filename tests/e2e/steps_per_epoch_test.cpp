// train.steps_per_epoch below a pass over the data: as Keras's iterator, the next epoch reads on where the last one stopped (across passes, shuffles and augmentation included), and a resume reads on from its checkpoint.
#include <catch2/catch.hpp>

#include <string>

#include "cli.h"
#include "small_cnn.h"

namespace {

// 320 samples, batch 32: 10 batches a pass; shuffled and flipped (both drawn per pass).
const std::string kConfig = [] {
  e2e::SmallCnn c;
  c.name = "spe";
  c.flip = true;
  c.train = "{epochs: 2, batch_size: 32}";
  c.optimizer = "{type: sgd, lr: 0.1, momentum: 0.9}";
  return c.yaml();
}();

}  // namespace

TEST_CASE("e2e steps_per_epoch: epochs shorter than a pass read on across epochs and passes, as two whole passes do, and resume exactly") {
  std::string dir = e2e::temp_dir("steps_per_epoch");
  e2e::write_file(dir + "/c.yaml", kConfig);
  // Two whole passes: 20 steps.
  auto whole = e2e::trainer("run c.yaml --run-dir whole", dir);
  INFO(whole.out << whole.err);
  REQUIRE(whole.code == 0);
  // The same 20 steps as 5 epochs of 4: epoch 3 ends pass 1 (batches 8, 9) and starts pass 2 (0, 1).
  auto short_epochs = e2e::trainer("run c.yaml --run-dir short --set train.epochs=5 --set train.steps_per_epoch=4", dir);
  INFO(short_epochs.out << short_epochs.err);
  REQUIRE(short_epochs.code == 0);
  const auto want = e2e::model_weights(dir + "/whole/checkpoints/epoch-0002.safetensors");
  CHECK(e2e::model_weights(dir + "/short/checkpoints/epoch-0005.safetensors") == want);
  // Interrupted at step 10 (epoch 3's third), resumed: the rest of pass 1 and pass 2 as before.
  auto cut = e2e::trainer("run c.yaml --run-dir cut --set train.epochs=5 --set train.steps_per_epoch=4", dir,
                          "TRAINER_TEST_SIGINT_AT_STEP=10");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(e2e::model_weights(dir + "/resumed/checkpoints/epoch-0005.safetensors") == want);
  CHECK(e2e::read_file(dir + "/resumed/metrics.csv") == e2e::read_file(dir + "/short/metrics.csv"));
}
