// StepScalars, LossSums and StepState: what a training step changes from one step to the next (rate, scales, Adam's corrections, the dropout seed), what it adds up (loss, hits) and what its update carries to the next (the loss scale, the optimizer's count), in memory the kernels read and write when they run — so a step recorded once (CapturedWork) replays with new values and none waits for the one before.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trainer {

// Written by the host before each step; read by the kernels (device memory on a GPU, host memory
// on the CPU). The static path passes the same values as kernel arguments: both give the same bits.
struct StepScalars {
  float lr = 0;              // the optimizer's learning rate
  float grad_scale = 1;      // the optimizer multiplies every gradient by it (1 / loss scale)
  float bias1 = 1, bias2 = 1;  // Adam: 1 - beta1^t, 1 - beta2^t
  float loss_scale = 1;      // the loss: dlogits = d(loss sum)/d(logits) x it (1 / global batch)
  uint32_t seed_lo = 0, seed_hi = 0;  // the step's seed (Executor::set_step_seed's value)
  // A fixed step's update decided on the device (StepRule, optim_update.h): unscale is 1 / the
  // loss scale (clip_value unscales by it); skip, set there for an inf/NaN gradient under loss
  // scaling, makes every update and clip of the step do nothing.
  float unscale = 1;
  uint32_t skip = 0;
  // train.ema: this step's update, unless skipped, is followed by the moving average's (the host
  // sets it from the optimizer's count and `every`; OptimUpdateKernel::average reads it).
  uint32_t average = 0;

  // A fixed step whose values are derived where it runs (OptimUpdateKernel::begin_fixed, from
  // StepState): the host writes these, and begin_fixed sets loss_scale, unscale, grad_scale,
  // bias1/bias2, average and skip from them and the state.
  float inv_scored = 0;       // 1 / the step's scored labels over every rank and micro-batch
  uint32_t average_every = 0;  // train.ema's `every` (0: no moving average)
  // Adam's (1 - beta1^t, 1 - beta2^t) for each count t the step may take the optimizer to, at
  // t mod kBiasRing (the host's exact values; the device picks by its own count).
  static constexpr int kBiasRing = 8;
  float bias_ring[kBiasRing][2] = {};

  void set_seed(uint64_t s) {
    seed_lo = uint32_t(s);
    seed_hi = uint32_t(s >> 32);
  }
#if defined(__CUDACC__)
  __host__ __device__
#endif
  uint64_t seed() const {
    return uint64_t(seed_lo) | (uint64_t(seed_hi) << 32);
  }
};

// The seed of node `node`'s randomness in a step whose seed is `step_seed` (Executor::set_step_seed).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint64_t node_seed(uint64_t step_seed, uint64_t node) {
  return step_seed * 1000003ull + node;
}

// A dropout seed: `value` itself, or — with `step` set — node_seed(step->seed(), value), read where
// the kernel runs.
struct DropoutSeed {
  uint64_t value = 0;
  const StepScalars* step = nullptr;
  // The seed a kernel draws with, read where it runs (`step` is that device's memory).
#if defined(__CUDACC__)
  __host__ __device__
#endif
  uint64_t resolve() const { return step ? node_seed(step->seed(), value) : value; }
};

// A step's loss statistics, added to in memory by the loss kernels; the host reads them once the
// step is done. bad_sample: the first sample whose label was out of range (-1: none).
struct LossSums {
  double loss_sum = 0;
  long long correct = 0, count = 0;
  long long bad_sample = -1, bad_label = 0;
  // An embedding's first id that is no integer in [0, vocabulary) where a recorded step runs (its
  // ids are not read back then): its flat position in the ids (-1: none), the vocabulary, the id
  // and the ids' last dimension (0 for ids of rank 1), for the host's message when it reads the step.
  long long bad_id_at = -1, bad_id_vocab = 0;
  float bad_id = 0;
  int32_t bad_id_cols = 0;
};

// How a fixed step decides its update on the device once backward is done (the finite check of
// loss scaling, clipping; StepUpdate::apply's host decisions as kernels): fixed for a run.
struct StepRule {
  enum Clip : int { None = 0, Norm = 1, Value = 2 };
  bool check_finite = false;  // loss scaling: an inf/NaN gradient skips the update
  int clip = None;
  double limit = 0;           // clip_norm's max_norm or clip_value's bound
  bool keras = true;          // clip_norm's coefficient: Keras's or PyTorch's
  bool active() const { return check_finite || clip != None; }
};

// What the device found, for the host to read with the loss sums (its scaler and norm follow the
// device's decision): whether every gradient was finite, and their sum of squares (clipping).
struct StepCheck {
  double sum_squares = 0;
  int finite = 1;
  int unused = 0;
};

// Where a fixed step keeps what its update changes for the next one — loss scaling's scale and
// growth count, the optimizer's count of updates applied — so that no step needs the one before
// it read back: begin_fixed derives the step's scalars from it, end_fixed advances it once the
// update is decided (OptimUpdateKernel; the host's LossScaler and Optimizer arithmetic).
struct StepState {
  float scale = 1;         // the loss scale (1 without loss scaling)
  int32_t unused = 0;
  int64_t good_steps = 0;  // dynamic scaling: finite steps since the scale last changed
  int64_t updates = 0;     // the optimizer's steps (a skipped step is not one)
};

// How a run's StepState moves (fixed for a run): loss scaling's mode and factors, and whether the
// update's factor is 1 (clip_value unscales the gradients itself).
struct StateRule {
  enum Mode : int { NoScaling = 0, Static = 1, Dynamic = 2 };
  int mode = NoScaling;
  float growth_factor = 2, backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  int clip_value = 0;
};

// A fixed step's memory, one buffer in the context's memory, read back whole behind the step
// (OpContext::read_back). Before each micro-batch the host writes one range of it: the scalars and
// a zeroed check, the state first where it seeds it, the sums (zeroed) last where the micro-batch
// starts them — an accumulated step's later micro-batches add to the sums its earlier ones left,
// so its last reads back the whole step's. The order makes every such range one copy.
struct StepMemory {
  StepState state;
  StepScalars scalars;
  StepCheck check;
  LossSums sums;
};

// The sums of the step memory whose scalars are `step` (a recorded program's layers are given its
// StepMemory's scalars: Executor::set_step_scalars), for a layer that notes what it found there.
inline LossSums* step_sums(const StepScalars* step) {
  char* scalars = reinterpret_cast<char*>(const_cast<StepScalars*>(step));
  return reinterpret_cast<LossSums*>(scalars - offsetof(StepMemory, scalars) + offsetof(StepMemory, sums));
}

}  // namespace trainer
