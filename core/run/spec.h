// RunSpec: one experiment config read once, in one place, into typed sections — each module reading
// its own section (did-you-mean for unknown keys, file:line:col in every error) — before anything is built.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpointer.h"
#include "core/checkpoint/init_from.h"
#include "core/data/data_spec.h"
#include "core/graph/model_spec.h"
#include "core/graph/placement.h"
#include "core/io/config.h"
#include "core/ops/context.h"
#include "core/optim/grad_clip.h"
#include "core/optim/loss_scale.h"
#include "core/optim/optimizer.h"
#include "core/optim/schedule.h"
#include "core/optim/weight_average.h"
#include "core/run/callbacks.h"
#include "core/runtime/devices.h"
#include "core/runtime/strategy_kind.h"

namespace trainer {

// `train:` — epochs, batches and the loss.
struct TrainSpec {
  int epochs = 1;
  int64_t batch_size = 32;       // per replica
  int64_t eval_batch_size = 0;   // 0: the training batch size
  bool drop_last = false;
  bool shuffle = true;
  int64_t steps_per_epoch = 0;   // 0: the whole training set
  std::string loss = "sparse_categorical_crossentropy";
  double label_smoothing = 0;    // Keras's label_smoothing on the loss: targets y·(1-ls) + ls/K (binary: + ls/2)
  // Keras's ignore_class (PyTorch's ignore_index): labels equal to it (pad positions) are not scored;
  // the loss and accuracy are means over the labels scored (categorical losses only).
  std::optional<int32_t> ignore_class;
  // Keras's fit(class_weight=): class index -> weight of its samples' training loss (others 1);
  // checked against the model's classes where the graph is known (class_weight_where names the key).
  std::map<int32_t, float> class_weight;
  std::string class_weight_where;
  double bucket_mb = 0;          // data parallelism: gradient all-reduce bucket size (0: auto)
  bool sync_bn = false;          // data parallelism: batch-norm statistics over the global batch
  LossScaleOptions loss_scale;   // `loss_scale:` (default: dynamic for fp16, none otherwise)
  GradClipOptions clip;          // `clip_norm:` or `clip_value:` (none by default)
  int accumulate = 1;            // micro-batches per optimizer step (gradient accumulation)
  double watchdog_s = 300;       // a rank in one phase longer than this ends the run (exit 5); 0: off
  // `ema: {decay, every}`: a moving average of the weights (core/optim/weight_average.h), kept on
  // each copy's device, identical on every replica; validation reports its metrics too
  // (val_accuracy_ema, val_loss_ema); eval, predict and export use it unless --no-ema.
  WeightAverageOptions ema;
};

// `logging:` — what a run writes besides its console, train.log and metrics files.
struct LoggingSpec {
  bool tensorboard = true;       // TensorBoard event files under RUN_DIR/tb (rank 0)
};

struct RunSpec {
  std::shared_ptr<cfg::Document> doc;  // the resolved config (written into the run directory)
  std::string name;
  uint64_t seed = 42;
  ModelSpec model;
  DataSpec data;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  CallbackSpec callbacks;
  TrainSpec train;
  DevicesSpec devices;
  StrategyKind strategy = StrategyKind::DataParallel;
  Placement placement;    // device_parallel: `placement:` resolved
  int microbatches = 1;   // device_parallel: `pipeline: {microbatches: M}`
  CheckpointSpec checkpoint;
  InitSpec init;
  LoggingSpec logging;
  Precision precision = Precision::FP32;  // `precision: fp32 | bf16 | fp16` (fp16: CUDA only)
  // The names of each epoch's metrics row (metrics.csv's columns after `epoch`): accuracy, loss,
  // lr, val_accuracy and val_loss with validation data, loss_scale (at the epoch's end) and
  // skipped_steps (the epoch's steps skipped for inf/NaN gradients) with loss scaling on, grad_norm
  // (the mean over the epoch's updates of the global gradient norm before clipping) with clipping on.
  std::vector<std::string> metrics;

  // The config's node at a dotted path ("devices.cpp"), for errors found after reading.
  cfg::Node at(const std::string& dotted) const;
};

// Loads `file` with `overrides` and reads every section; what can be checked without data or a
// device (the model graph's shapes and parameters among it) is checked now, so a typo fails in
// a second.
RunSpec load_run_spec(const std::string& file, const std::vector<std::string>& overrides);
RunSpec read_run_spec(std::shared_ptr<cfg::Document> doc);

}  // namespace trainer
