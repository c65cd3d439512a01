// Experiment: one YAML file read and checked as a whole — every top-level section, with
// did-you-mean for unknown keys — before anything is built.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/graph/model_spec.h"
#include "core/graph/placement.h"
#include "core/io/config.h"
#include "core/ops/context.h"
#include "core/optim/loss_scale.h"

namespace trainer {

struct TrainOptions {
  int epochs = 1;
  int64_t batch_size = 32;       // per replica
  int64_t eval_batch_size = 0;   // 0: the training batch size
  bool drop_last = false;
  bool shuffle = true;
  int64_t steps_per_epoch = 0;   // 0: the whole training set
  std::string loss = "sparse_categorical_crossentropy";
  double bucket_mb = 0;          // data parallelism: gradient all-reduce bucket size (0: auto)
  bool sync_bn = false;          // data parallelism: batch-norm statistics over the global batch
  LossScaleOptions loss_scale;   // `loss_scale:` (default: dynamic for fp16, none otherwise)
};

struct DeviceRequest {
  std::vector<int> gpus;  // empty: CPU
  bool all_gpus = false;  // `gpus: all`: every visible GPU
  int cpu_replicas = 1;
  int threads = 0;        // CPU compute threads per replica (0: every core)
  bool tf32 = true;       // GPU fp32: TF32 tensor cores (as PyTorch's cuDNN and TF); false: strict fp32
  int64_t workspace_mb = 0;  // GPU convolution workspace budget in MiB (0: 1/16 of the device memory, <= 4 GiB)
};

// `checkpoint:` — when checkpoints are written (the run directory's checkpoints/) and how many kept.
struct CheckpointOptions {
  int every = 1;               // epochs between checkpoints (0: none at epoch ends)
  int64_t every_steps = 0;     // also every N global steps (0: off)
  int keep = 2;                // the newest K periodic checkpoints are kept
  std::string best;            // a metric ("val_accuracy"): also keep best.safetensors
  bool best_max = false;       // whether larger is better for `best` (mode auto|min|max)
};

// `init:` — start from another run's weights (fine-tuning).
struct InitOptions {
  std::string from;            // a .safetensors file (a checkpoint or any file with our tensor names)
  bool skip_mismatch = false;  // parameters whose shape differs keep their initial values
  cfg::Node node;              // for messages
};

struct Experiment {
  std::shared_ptr<cfg::Document> doc;
  std::string name;
  uint64_t seed = 42;
  ModelSpec model;
  cfg::Node data, optimizer, schedule, callbacks;  // read by their own modules
  TrainOptions train;
  DeviceRequest devices;
  std::string strategy = "data_parallel";
  Placement placement;    // device_parallel: `placement:` resolved
  int microbatches = 1;   // device_parallel: `pipeline: {microbatches: M}`
  CheckpointOptions checkpoint;
  InitOptions init;
  std::string lr_scaling = "none";  // optimizer.lr_scaling: none | linear (lr x replicas, Goyal et al.)
  Precision precision = Precision::FP32;  // `precision: fp32 | bf16 | fp16` (fp16: CUDA only)
};

// Loads `file` with `overrides` and checks everything that can be checked without data or a
// device: the model graph (shapes, parameters), the optimizer and the schedule.
Experiment load_experiment(const std::string& file, const std::vector<std::string>& overrides);
Experiment read_experiment(std::shared_ptr<cfg::Document> doc);
// The names of each epoch's metrics row (metrics.csv's columns after `epoch`); with loss scaling
// on, loss_scale (at the epoch's end) and skipped_steps (the epoch's steps skipped for inf/NaN gradients).
std::vector<std::string> metric_names(const Experiment& e);
// The op context options of one replica or stage with `threads` compute threads (CPU): precision,
// TF32 and the workspace budget (GPU) from the config.
ContextOptions context_options(const Experiment& e, int threads);

}  // namespace trainer
