// A batch's samples as the model's inputs: one tensor per model input, on the host or copied to a device.
#pragma once
#include <vector>

#include "core/ops/context.h"

namespace trainer {

// A batch's model inputs as host tensors, one per input: `host` is [N, ...input] for a single
// input (returned as a view), or [N, total] with the inputs' values one after another per sample.
std::vector<Tensor> host_inputs(const Tensor& host, const std::vector<Shape>& shapes);
// One batch's model inputs as device tensors: `host` is [N, ...input] for a single input, or
// [N, total] with the inputs' values one after another per sample; `dev` holds device copies
// (reused between calls), and views of host memory are returned on the CPU.
std::vector<Tensor> split_inputs(OpContext& ctx, const Tensor& host, const std::vector<Shape>& shapes,
                                 std::vector<Tensor>& staging);

}  // namespace trainer
