// What `trainer bench` measures of a strategy's training steps (throughput, where a step's time
// goes, per-layer times, timelines, the pipeline bubble), and the batches it feeds them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/data/loader.h"
#include "core/dist/bucket_reducer.h"
#include "core/runtime/step_parts.h"

namespace trainer {

// CPU seconds used by this process so far, all threads (CLOCK_PROCESS_CPUTIME_ID).
double process_cpu_seconds();

struct BenchOptions {
  int steps = 20, warmup = 3;
  bool layers = false;  // per-layer times (synchronised per layer: slower overall)
  // Batches from the config's training data through the loader `trainer run` uses (input wait
  // measured), instead of one fixed synthetic batch per rank.
  bool data = false;
  std::string base_dir = ".";  // relative data paths resolve against this
  // The machine's ceiling for one replica (GFLOP/s of a training step of one large convolution
  // with the replica's threads; core/run/ceiling.h), 0 when unknown: --layers gives each layer's
  // share of it.
  double ceiling_gflops = 0;
  float lr = 0.01f;    // the learning rate of the steps (the run's: plan.base_lr)
  int accumulate = 1;  // micro-batches per optimizer step (train.accumulate): a timed step is all of them
};

// One data-parallel step as a timeline (Horovod's timeline, for one rank): seconds from the step's
// start to the end of forward, of backward and of the updates, and each gradient bucket's reduction.
struct StepTimeline {
  double forward_end = 0, backward_end = 0, update_end = 0;
  const char* reduced_by = "none";  // GradBuckets::reduced_by()
  std::vector<BucketRange> buckets;
  std::vector<BucketTrace> trace;
};
using RankTimelines = std::vector<std::pair<int, StepTimeline>>;  // (global rank, its last timed step)

struct BenchResult {
  std::string device;
  int threads = 0;
  int64_t batch = 0;  // global
  double images_per_second = 0, ms_per_step = 0, gflops_per_second = 0;
  double hidden_fraction = 1;  // the part of the all-reduce work that overlapped backward
  double peak_device_mb = 0;   // GPU memory the replicas' allocators held at most (0 on the CPU)
  // Allocator calls (host and device tensor allocators of every replica or stage) in the timed
  // steps, per step: 0 once a step's buffers are planned.
  double allocations_per_step = 0;
  // The host's waits for device work in the timed steps, per step (count_host_wait: every
  // process's trainee together; 0 on the CPU, whose ops run as they are called).
  double host_syncs_per_step = 0;
  // The process's CPU time (every thread: compute, OpenMP teams, loader) over the wall time of the
  // timed steps: how many cores it kept busy. `--threads 1` on one replica should be 1.
  double cpu_cores = 0;
  // The ceiling of this process's replicas together (replicas x BenchOptions::ceiling_gflops) and
  // the GEMM's (0: not measured, e.g. on a GPU).
  double ceiling_gflops = 0, gemm_ceiling_gflops = 0;
  bool ceiling_cached = false;  // read from the machine's cache rather than measured by this run
  StepBreakdown parts;
  std::vector<std::string> layer_lines;  // "name  fwd ms  bwd ms", slowest first
  // Data parallel: the last timed step of each of this process's replicas.
  RankTimelines timelines;
  // Device parallel: micro-batches per batch and the stages' idle fraction (GPipe's bubble is
  // (S - 1) / (M + S - 1) for S balanced stages); -1 for data parallel.
  int microbatches = 0;
  double bubble = -1;
  // Micro-batches per optimizer step (train.accumulate; a timed step is all of them) and rank 0's
  // (hybrid: copy 0's) gradient all-reduces per timed step (1 whatever the micro-batches; 0 for
  // one pipeline, whose copies of a shared layer are summed apart: allreduce_ms).
  int accumulate = 1;
  double gradient_allreduces_per_step = 0;
  // Every trainee's last timed step ran as one recorded program (a CUDA graph), not launched op by op.
  bool step_graph = false;
};

// The steps' batches for one rank: a fixed random batch (synthetic input), or the next batch of
// the rank's training loader, epoch after epoch as `trainer run` reads them (train.steps_per_epoch
// included), with the time spent waiting for it.
class BenchInput {
 public:
  // From the rank's training loader; `steps_per_epoch` 0: the loader's whole epoch.
  BenchInput(Loader& loader, int64_t steps_per_epoch);
  // One fixed batch of normal noise (samples of `sample` shape; token ids uniform in [0, ids)
  // when ids > 0, for a model whose input feeds an embedding) and labels uniform in [0, classes)
  // of `label_shape` per sample, a different one per rank; `replicas`: data-parallel ranks in the job.
  BenchInput(const Shape& sample, int64_t batch, int classes, uint64_t seed, int rank, int replicas,
             const Shape& label_shape = Shape{}, int64_t ids = 0);
  // The next step's batch (valid until the next call); adds the seconds it took to `waited`.
  const Batch& next(double& waited);
  bool synthetic() const { return loader_ == nullptr; }

 private:
  Loader* loader_ = nullptr;
  Batch batch_;
  int64_t steps_per_epoch_ = 0, epoch_ = 0, step_ = 0;
};

}  // namespace trainer
