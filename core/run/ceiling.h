// The machine's ceiling: what one large convolution and one large GEMM reach through this build's CPU kernels (oneDNN) with a run's threads and precision, measured once per machine and cached.
#pragma once
#include <optional>
#include <string>

#include "core/ops/context.h"

namespace trainer {

struct Ceiling {
  // A training step's FLOPs (3x forward: forward, gradient of the input, gradient of the weights)
  // per second of one 3x3 'same' convolution, batch 32, 32x32, 128 -> 128 channels (the size of
  // MiniGoogLeNet's widest layers), and of one dense layer 1024 -> 1024 on 512 rows.
  double conv_gflops = 0, gemm_gflops = 0;
  bool cached = false;  // read from the cache rather than measured now
  std::string key;      // what it was measured for: CPU model, oneDNN's ISA, threads, precision
};

// The ceiling for `threads` CPU threads in `precision` (fp32 or bf16): from the cache
// (TRAINER_CACHE_DIR, else $XDG_CACHE_HOME/trainer, else ~/.cache/trainer: ceilings.json), or
// measured (about a second) and stored there. nullopt where the CPU cannot run the precision.
// TRAINER_CEILING=measure measures again (and stores); =off gives nullopt. `again`: measure and
// store whatever the cache holds (a run that beat the cached value shows it was measured while
// something else ran: core/run/bench.cpp).
std::optional<Ceiling> cpu_ceiling(int threads, Precision precision, bool again = false);

// Where the cache lives ("" when no directory can be named).
std::string ceiling_cache_path();

}  // namespace trainer
