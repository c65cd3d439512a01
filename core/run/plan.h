// RunPlan: every fact a run derives from its spec — devices, replicas, threads, batches, steps,
// the learning rate's scaling, FLOPs, parameters, memory, the loss head, what each model copy is
// built from — computed once; the banner, `summary` and `bench` print from it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"
#include "core/runtime/trainee.h"

namespace trainer {

struct RunPlan {
  StrategyKind strategy = StrategyKind::DataParallel;
  TraineeSpec trainee;               // what every replica or stage is built from
  std::vector<Device> devices;       // this process's: one per replica, or one per placement label
  std::vector<std::string> device_notes;  // where placement labels ran (virtual CPU devices)
  int processes = 1, process = 0;    // the job (mpirun, srun) and this process's rank in it
  int local_replicas = 1;            // data-parallel ranks of this process (1 for a pipeline)
  int replicas = 1;                  // data-parallel ranks of the job
  int first_rank = 0;                // global rank of this process's first replica
  int threads = 1;                   // CPU compute threads per replica or stage
  int64_t batch = 0;                 // per replica
  int64_t global_batch = 0;
  int64_t eval_batch = 0;            // per replica
  int64_t steps_per_epoch = 0;       // set from the training loader (with_steps); 0 until then
  double lr_factor = 1, base_lr = 0; // optimizer.lr_scaling (or the checkpoint's), and lr after it
  std::string batch_note;            // how a resumed run keeps the checkpoint's global batch
  std::string config_hash;           // the config's (checkpoint.h), computed once here
  int64_t flops_per_sample = 0;      // forward, multiply-adds x2
  int64_t params = 0, trainable_params = 0;
  int64_t param_bytes = 0;           // weights, gradients and optimizer state of one copy
  int64_t activation_bytes_per_sample = 0;  // every layer's output, f32
  // Memory each device of this process holds (f32): a replica's whole model (data parallel), or
  // each placement label's part (device parallel; a shared layer's parameters on every device using it).
  struct DeviceMemory {
    std::string device;
    int64_t param_bytes = 0;                  // weights, gradients and optimizer state
    int64_t activation_bytes_per_sample = 0;  // outputs, their gradients, received copies
  };
  std::vector<DeviceMemory> memory;
  std::string logits;                // the layer whose output the loss scores
  int64_t logits_units = 0;          // its outputs per sample, or per position (classes; 1: a binary classifier)
  int64_t logits_positions = 0;      // 0: one score vector per sample; T: logits [T, units], a label per position
  bool fused_loss = false;           // the output activation is folded into the loss
  std::string fused_output;          // the activation the loss folds in ("softmax", "sigmoid")

  // Sets steps_per_epoch from the training loader's batches per epoch (train.steps_per_epoch caps
  // it); a DataError when not one global batch fits.
  void with_steps(int64_t batches_per_epoch, int64_t train_samples);
  // The start-up lines: model, devices and batches, optimizer, callbacks ("Devices: ...").
  std::vector<std::string> banner(const RunSpec& e) const;
};

// What every copy of `e`'s model is built from (the plan's `trainee`, threads left to the strategy).
TraineeSpec trainee_spec(const RunSpec& e);
// devices.cuda_graphs as configured, unless TRAINER_CUDA_GRAPHS says 0 (every step launched kernel
// by kernel: the reference) or 1; anything else is a ConfigError naming the variable.
bool cuda_graphs_wanted(bool configured);

// Plans a run of `e` in this process (this_process(): several under mpirun/srun). A resumed run
// keeps the checkpoint's global batch and learning-rate factor. DeviceError when the devices asked
// for are not there; ConfigError for what cannot be planned (a device-parallel job over processes).
RunPlan plan_run(const RunSpec& e, const std::optional<CheckpointInfo>& resume = std::nullopt);
// The same without choosing devices (`trainer summary` on any machine): devices stay empty, one
// replica, the machine's threads.
RunPlan plan_model(const RunSpec& e);

}  // namespace trainer
