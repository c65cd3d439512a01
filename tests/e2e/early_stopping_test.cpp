// early_stopping.restore_best_weights through the CLI, as Keras 3's EarlyStopping: the best epoch's weights are put back when training ends (stopped early or not), the run's last checkpoint holds them, and a resumed run restores them too.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "cli.h"
#include "core/io/safetensors.h"
#include "small_cnn.h"

using Catch::Contains;

namespace {

// 10 steps an epoch (320 samples, batch 32). Monitoring the training loss for its maximum makes
// the first epoch the best (the loss falls): 4 epochs run, none stops them.
const std::string kConfig = [] {
  e2e::SmallCnn c;
  c.name = "es";
  c.val = true;
  c.train = "{epochs: 4, batch_size: 32}";
  c.optimizer = "{type: sgd, lr: 0.1, momentum: 0.9}";
  c.extra = "checkpoint: {every: 1, keep: 100}\n"
            "callbacks:\n  early_stopping: {monitor: loss, mode: max, patience: 10, restore_best_weights: true}\n";
  return c.yaml();
}();

// Whether a checkpoint holds early stopping's copy of the best epoch's weights.
bool holds_best_weights(const std::string& file) {
  trainer::SafeTensorsReader r(file);
  for (const trainer::SafeTensor& t : r.tensors())
    if (t.name.rfind("early_stopping/", 0) == 0) return true;
  return false;
}

}  // namespace

TEST_CASE("e2e early stopping: restore_best_weights puts the best epoch's weights back at the end of a run that was not stopped, and after --resume") {
  std::string dir = e2e::temp_dir("early_restore");
  e2e::write_file(dir + "/c.yaml", kConfig);
  auto full = e2e::trainer("run c.yaml --run-dir full", dir);
  INFO(full.out << full.err);
  REQUIRE(full.code == 0);
  std::smatch m;
  const std::string out = full.out;
  REQUIRE(std::regex_search(out, m, std::regex("Restoring model weights from the end of the best epoch: (\\d+)\\.")));
  const int best = std::stoi(m[1]);
  CHECK(best == 1);  // the loss's maximum: its first epoch
  CHECK_FALSE(Contains("early stopping").match(out));
  const std::string ck = dir + "/full/checkpoints/";
  // The run's last checkpoint holds the best epoch's weights, not those its last epoch trained.
  const auto last = e2e::model_weights(ck + "epoch-0004.safetensors");
  CHECK(last == e2e::model_weights(ck + "epoch-0001.safetensors"));
  CHECK(holds_best_weights(ck + "epoch-0002.safetensors"));

  // Interrupted in epoch 2 (step 14), resumed: its restore needs the best epoch's weights, which
  // the interrupt's checkpoint holds; the run ends as the uninterrupted one did.
  auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=14");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK_THAT(res.out, Contains("Restoring model weights from the end of the best epoch: 1."));
  CHECK(e2e::model_weights(dir + "/resumed/checkpoints/epoch-0004.safetensors") == last);
  CHECK(e2e::read_file(dir + "/resumed/checkpoints/epoch-0004.safetensors") == e2e::read_file(ck + "epoch-0004.safetensors"));

  // Stopped early (patience 1, min_delta larger than any change): Keras 3's order of the lines.
  auto stop = e2e::trainer("run c.yaml --run-dir stop --set callbacks.early_stopping.patience=1 "
                           "--set callbacks.early_stopping.min_delta=100",
                           dir);
  INFO(stop.out << stop.err);
  REQUIRE(stop.code == 0);
  CHECK_THAT(stop.out, Contains("Epoch 2: early stopping\nRestoring model weights from the end of the best epoch: 1."));
  CHECK(e2e::model_weights(dir + "/stop/checkpoints/epoch-0002.safetensors") == e2e::model_weights(dir + "/stop/checkpoints/epoch-0001.safetensors"));
}
