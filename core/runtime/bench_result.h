// What `trainer bench` measures of a strategy's training steps (throughput, where a step's time
// goes, per-layer times, timelines, the pipeline bubble), and the batches it feeds them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/data/loader.h"
#include "core/dist/bucket_reducer.h"
#include "core/runtime/trainee.h"

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
};

// One pipeline stage's share of a timed step, ms per step.
struct StagePart {
  std::string device;
  double busy_ms = 0, wait_ms = 0, optimizer_ms = 0;  // in the schedule: working / waiting for other stages
  double forward_ms = 0;  // the part of busy_ms in forwards (the loss included); the rest is backward
};

// Where a timed step's time went, ms per step: rank 0's step for data parallelism (each rank
// times its own; they meet in the all-reduces), the whole pipeline for device parallelism.
struct StepBreakdown {
  std::string scope;  // "rank 0 of 2", "all stages"
  // Data parallel: forward (up to the logits) and backward (with the loss) measured apart.
  // Device parallel: forward and backward interleave across stages: only their sum, the schedule.
  bool split = true;
  double forward_ms = 0, backward_ms = 0, forward_backward_ms = 0;
  double optimizer_ms = 0;
  // Gradient communication: its work, and the part of it the step waited for (not hidden behind
  // backward). Device parallel: a shared layer's gradients summed over its devices (not hidden).
  double allreduce_ms = 0, exposed_allreduce_ms = 0;
  // Data parallel: the updates waited for another replica whose backward was behind (imbalance).
  double skew_ms = 0;
  double input_wait_ms = 0;  // waiting for the loader's next batch (0 for synthetic input)
  bool data = false;         // input from the training data, else a fixed synthetic batch
  std::vector<StagePart> stages;  // device parallel only

  // The parts on the step's critical path (communication only where exposed); the rest of the
  // step's wall time is "other" (step-end collectives, the loop itself).
  double accounted_ms() const { return forward_backward_ms + optimizer_ms + exposed_allreduce_ms + skew_ms + input_wait_ms; }
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
};

// The steps' batches for one rank: a fixed random batch (synthetic input), or the next batch of
// the rank's training loader, epoch after epoch as `trainer run` reads them (train.steps_per_epoch
// included), with the time spent waiting for it.
class BenchInput {
 public:
  // From the rank's training loader; `steps_per_epoch` 0: the loader's whole epoch.
  BenchInput(Loader& loader, int64_t steps_per_epoch);
  // One fixed batch of normal noise (samples of `sample` shape) and labels uniform in
  // [0, classes), a different one per rank; `replicas`: data-parallel ranks in the job.
  BenchInput(const Shape& sample, int64_t batch, int classes, uint64_t seed, int rank, int replicas);
  // The next step's batch (valid until the next call); adds the seconds it took to `waited`.
  const Batch& next(double& waited);
  bool synthetic() const { return loader_ == nullptr; }

 private:
  Loader* loader_ = nullptr;
  Batch batch_;
  int64_t steps_per_epoch_ = 0, epoch_ = 0, step_ = 0;
};

// One timed optimizer step of every strategy's bench: `k` micro-batches (train.accumulate) from
// `in` through t.train_step, `after` (when given) after each. Returns the step's samples over
// every rank; adds the input's wait to `waited`.
int64_t bench_step(Trainee& t, BenchInput& in, int k, float lr, uint64_t seed, bool& stop, double& waited,
                   const std::function<void()>& after = {});

}  // namespace trainer
