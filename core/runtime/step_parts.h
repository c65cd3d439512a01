// Where a training step's time goes (StepBreakdown: forward, backward, optimizer, communication,
// each pipeline stage's share), as each trainee reports its last step and `trainer bench` sums them.
#pragma once
#include <string>
#include <vector>

namespace trainer {

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
  // Sums over steps (each time and each stage's, stage by stage; the labels of the first kept),
  // and the sum divided by the steps.
  StepBreakdown& operator+=(const StepBreakdown& o);
  StepBreakdown per_step(int steps) const;
};


}  // namespace trainer
