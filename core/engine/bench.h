// bench(): training throughput of a config's model on synthetic batches (no data loading), with
// optional per-layer forward/backward times — what `trainer bench` prints.
#pragma once
#include <string>
#include <vector>

#include "core/engine/experiment.h"

namespace trainer {

struct BenchOptions {
  int steps = 20, warmup = 3;
  bool layers = false;  // per-layer times (synchronised per layer: slower overall)
};

struct BenchResult {
  std::string device;
  int threads = 0;
  int64_t batch = 0;  // global
  double images_per_second = 0, ms_per_step = 0, gflops_per_second = 0;
  double allreduce_ms_per_step = 0;  // rank 0's gradient all-reduce work per step
  double hidden_fraction = 1;        // the part of it that overlapped backward
  std::vector<std::string> layer_lines;  // "name  fwd ms  bwd ms", slowest first
  // Device parallel: micro-batches per batch and the stages' idle fraction (GPipe's bubble is
  // (S - 1) / (M + S - 1) for S balanced stages); -1 for data parallel.
  int microbatches = 0;
  double bubble = -1;
};

BenchResult bench(const Experiment& e, const BenchOptions& o);
// The same for strategy: device_parallel (core/engine/pipeline/pipeline_bench.cpp).
BenchResult bench_pipeline(const Experiment& e, const BenchOptions& o);

}  // namespace trainer
