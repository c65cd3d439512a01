// Training callbacks from the `callbacks:` section, with Keras' defaults and messages:
// early_stopping, reduce_lr_on_plateau and terminate_on_nan. Every replica runs its own copy on
// the same (all-reduced) metrics, so all of them decide alike; their state goes into checkpoints.
#pragma once
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/io/config.h"
#include "core/io/progress.h"

namespace trainer {

// The `callbacks:` section: each callback's settings (Keras' names and defaults) and the state it
// keeps between epochs (checkpointed).
struct EarlyStoppingSpec {
  std::string monitor = "val_loss";
  double min_delta = 0, baseline = NAN;
  int patience = 0, start_from_epoch = 0;
  bool max = false, restore_best_weights = false;
  // state
  int wait = 0, best_epoch = -1;
  double best = NAN;
};
struct ReduceLrSpec {
  std::string monitor = "val_loss";
  double factor = 0.1, min_delta = 1e-4, min_lr = 0;
  int patience = 10, cooldown = 0;
  bool max = false;
  // state
  int wait = 0, cooldown_counter = 0;
  double best = NAN, scale = 1;
};
struct CallbackSpec {
  std::optional<EarlyStoppingSpec> early_stopping;
  std::optional<ReduceLrSpec> reduce_lr_on_plateau;
  bool terminate_on_nan = false;
};
// `metrics`: the names each epoch's row will have (a monitored metric must be one of them).
CallbackSpec read_callbacks(const cfg::Node& section, const std::vector<std::string>& metrics);

class Callbacks {
 public:
  Callbacks() = default;
  explicit Callbacks(const CallbackSpec& s)
      : early_(s.early_stopping), plateau_(s.reduce_lr_on_plateau), terminate_on_nan_(s.terminate_on_nan) {}

  // After each training step with the step's mean loss; false: stop now (terminate_on_nan),
  // with Keras' message in `message`.
  bool on_batch_end(int64_t batch, double loss, std::string* message);

  struct EpochEnd {
    bool stop = false;               // early stopping
    bool snapshot_best = false;      // keep a copy of the weights now (restore_best_weights)
    bool restore_best = false;       // put that copy back before ending
    std::vector<std::string> messages;
  };
  // After each epoch's validation: `lr` is the rate the epoch ended with; `last`: training ends
  // after this epoch anyway (its number is train.epochs). Training's end — an early stop or the
  // last epoch — is Keras 3's on_train_end: restore_best_weights puts the best epoch's weights
  // back either way.
  EpochEnd on_epoch_end(int epoch, const Metrics& row, double lr, bool last = false);
  // Whether the weights of the best epoch are kept (early_stopping.restore_best_weights), and
  // that epoch (0-based; -1 before one was monitored).
  bool restores_best() const { return early_ && early_->restore_best_weights; }
  int best_epoch() const { return early_ ? early_->best_epoch : -1; }

  // The learning rate to use given the schedule's: reduce_lr_on_plateau's reductions applied.
  double adjust_lr(double scheduled) const;
  nlohmann::json state() const;
  void restore(const nlohmann::json& s);
  std::vector<std::string> describe() const;  // one line per active callback

 private:
  using EarlyStopping = EarlyStoppingSpec;
  using ReduceLr = ReduceLrSpec;
  std::optional<EarlyStopping> early_;
  std::optional<ReduceLr> plateau_;
  bool terminate_on_nan_ = false;
};

}  // namespace trainer
