// Checkpoints: a replica's weights, optimizer state, batch-norm statistics and the data's
// normalisation statistics in a safetensors file, and the training position (epoch, step,
// schedule, RNG, callbacks) in a JSON sidecar; finding the newest valid one; loading into a replica.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/data/transforms.h"
#include "core/checkpoint/model_state.h"
#include "core/io/config.h"
#include "core/io/progress.h"

namespace trainer {

constexpr int kCheckpointFormat = 1;

// Where training stands at a step boundary: everything besides the tensors that an exact
// continuation needs. The RNG is stateless (Philox keyed by seed, step and rank; the loader's
// order and augmentation are functions of seed, epoch and batch), so seed and position are its state.
struct TrainState {
  int epoch = 0;               // the epoch in progress, 0-based; all earlier ones are complete
  int64_t step_in_epoch = 0;   // steps of `epoch` done (0: the epoch has not started)
  int64_t global_step = 0;
  int64_t optimizer_steps = 0;
  double loss_sum = 0;         // `epoch`'s sums so far (for its metrics row)
  int64_t correct = 0, count = 0;
  double grad_norm_sum = 0;    // `epoch`'s gradient norms so far (clipping on): sum and count
  int64_t grad_norm_count = 0;
  uint64_t seed = 0;
  int replicas = 1;
  int64_t global_batch = 0;
  double lr_factor = 1;        // optimizer.lr_scaling in force when written
  std::string config_hash;
  std::string reason;          // epoch | steps | interrupt
  Metrics last;                // the last complete epoch's metrics row
  nlohmann::json callbacks = nlohmann::json::object();
  nlohmann::json loss_scale = nlohmann::json::object();  // LossScaler::state() (empty: no loss scaling)
};

// A hash of the resolved config without its `devices` and `checkpoint` sections: the same
// experiment run on other devices, or checkpointed differently, resumes.
std::string config_hash(const cfg::Document& doc);

struct CheckpointInfo {
  std::string weights;  // .safetensors
  std::string sidecar;  // .json
  TrainState state;
  nlohmann::json normalization;  // the sidecar's data statistics entry (null when it has none)
  std::vector<std::string> classes;  // the training set's class names (empty when not recorded)
  // The weights file's bytes, read when the checkpoint was checked: loading uses them, so a
  // checkpoint that a live run prunes after it was chosen still loads (eval, --resume).
  std::shared_ptr<const std::string> weights_bytes;
};

// Writes dir/<stem>.safetensors, then dir/<stem>.json (the sidecar makes the pair valid, so a
// crash between the two leaves the previous checkpoint the newest valid one).
// `classes`: the training set's class names, kept for predict (may be empty).
// `best`: early_stopping.restore_best_weights's copy of the best epoch's weights (the model's
// layout), stored beside them as "early_stopping/<parameter>" so that a resumed run can put them
// back; null when there is none.
CheckpointInfo save_checkpoint(const std::string& dir, const std::string& stem, ModelState& r, const NormStats* stats,
                               const TrainState& s, const std::vector<std::string>& classes = {},
                               const std::vector<float>* best = nullptr);
// Reads and checks a checkpoint given by either of its files: the sidecar parses and the weights
// file has the size and CRC-32 the sidecar recorded. FileError (exit 3) otherwise.
CheckpointInfo read_checkpoint(const std::string& path);
// The checkpoints in `dir`, newest (furthest training position) first, without their bytes;
// invalid ones are skipped and, when `skipped` is given, described there. `verify`: false reads
// the sidecars only (rotation), true also each weights file's size and CRC-32.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir, std::vector<std::string>* skipped = nullptr,
                                             bool verify = true);
// The newest valid checkpoint in `dirs` (of config `hash`, unless empty), by the training position
// its sidecar records (epoch, samples into it, step), never by file time; its bytes are held.
// Invalid ones passed over on the way are described in `skipped`; ones a live run pruned meanwhile
// are passed over silently.
std::optional<CheckpointInfo> newest_checkpoint(const std::vector<std::string>& dirs, const std::string& hash,
                                                std::vector<std::string>* skipped);

// train.ema: a checkpoint holds the weights' moving average beside them, every parameter (batch-
// norm statistics included) as "ema/<parameter>".
inline std::string ema_tensor_name(const std::string& param) { return "ema/" + param; }
bool has_ema(const CheckpointInfo& c);
inline std::string best_weights_tensor_name(const std::string& param) { return "early_stopping/" + param; }
// A tensor a checkpoint holds besides the model's parameters: optimizer state, normalisation
// data, the moving average, the best epoch's weights.
inline bool is_state_tensor(const std::string& name) {
  for (const char* p : {"optimizer/", "data/", "ema/", "early_stopping/"})
    if (name.rfind(p, 0) == 0) return true;
  return false;
}
// The best epoch's weights a checkpoint holds (save_checkpoint's `best`) in `r`'s layout; empty
// when it holds none (written without restore_best_weights, or before an epoch was monitored).
std::vector<float> load_best_weights(const CheckpointInfo& c, ModelState& r);

// Which weights a model copy is given from a checkpoint.
enum class LoadWeights {
  Trained,  // the weights the optimizer updates
  Average,  // their moving average (train.ema) when the checkpoint holds one, else the trained ones
};

// Loads weights (and, with `optimizer`, the optimizer state, the moving average when the model
// keeps one, and the step count) into `r`. Names and shapes must match the replica's model:
// otherwise a ConfigError naming the checkpoint.
void load_checkpoint(const CheckpointInfo& c, ModelState& r, bool optimizer, LoadWeights which = LoadWeights::Trained);
// The normalisation statistics stored with a checkpoint (empty kind None when it has none).
NormStats checkpoint_stats(const CheckpointInfo& c);

}  // namespace trainer
