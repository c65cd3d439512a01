// Gradient accumulation's held sum: kept and added back with the context's element-wise kernels.
#include "core/runtime/accumulation.h"

namespace trainer {

GradAccumulator::GradAccumulator(OpContext& ctx, int64_t floats)
    : held_(ctx.zeros(Shape{floats})), ew_(make_kernel<ElementwiseKernel>(ctx, ElementwiseParams{})) {}

void GradAccumulator::hold(const Tensor& grads, bool first) {
  if (first) ew_->convert(grads, held_);
  else ew_->accumulate(grads, held_);
}

void GradAccumulator::add_into(const Tensor& grads, int64_t from, int64_t to) {
  if (from >= to) return;
  Tensor g = grads.slice(from, to);
  ew_->accumulate(held_.slice(from, to), g);
}

}  // namespace trainer
