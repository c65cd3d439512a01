// A batch's samples as the model's inputs: one tensor per model input, on the host or copied to a
// device, through buffers kept between batches (a step of one batch size allocates nothing).
#pragma once
#include <vector>

#include "core/ops/context.h"

namespace trainer {

class BatchInputs {
 public:
  // The batch's model inputs as host tensors, one per input: `host` is [N, ...input] for a single
  // input (returned as a view), or [N, total] with the inputs' values one after another per sample
  // (gathered into buffers of this object's, valid until the next call).
  const std::vector<Tensor>& on_host(const Tensor& host, const std::vector<Shape>& shapes);
  // The same on ctx's device (copies into buffers of this object's); views of host memory on the CPU.
  const std::vector<Tensor>& on(OpContext& ctx, const Tensor& host, const std::vector<Shape>& shapes);

 private:
  std::vector<Tensor> host_, gathered_, device_, out_;
};

}  // namespace trainer
