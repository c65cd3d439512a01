// StepBreakdown's sums over steps.
#include "core/runtime/step_parts.h"

#include <algorithm>

namespace trainer {

StepBreakdown& StepBreakdown::operator+=(const StepBreakdown& o) {
  forward_ms += o.forward_ms, backward_ms += o.backward_ms, forward_backward_ms += o.forward_backward_ms;
  optimizer_ms += o.optimizer_ms, allreduce_ms += o.allreduce_ms, exposed_allreduce_ms += o.exposed_allreduce_ms;
  skew_ms += o.skew_ms, input_wait_ms += o.input_wait_ms;
  if (stages.size() < o.stages.size()) stages.resize(o.stages.size());
  for (size_t s = 0; s < o.stages.size(); ++s) {
    StagePart& a = stages[s];
    const StagePart& b = o.stages[s];
    if (a.device.empty()) a.device = b.device;
    a.busy_ms += b.busy_ms, a.wait_ms += b.wait_ms, a.optimizer_ms += b.optimizer_ms, a.forward_ms += b.forward_ms;
  }
  split = o.split;
  return *this;
}

StepBreakdown StepBreakdown::per_step(int steps) const {
  StepBreakdown p = *this;
  const double k = 1.0 / double(std::max(steps, 1));
  p.forward_ms *= k, p.backward_ms *= k, p.forward_backward_ms *= k, p.optimizer_ms *= k;
  p.allreduce_ms *= k, p.exposed_allreduce_ms *= k, p.skew_ms *= k, p.input_wait_ms *= k;
  for (StagePart& s : p.stages) s.busy_ms *= k, s.wait_ms *= k, s.optimizer_ms *= k, s.forward_ms *= k;
  return p;
}

}  // namespace trainer
