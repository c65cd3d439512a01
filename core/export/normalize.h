// The training input normalisation for the exported model: x = (pixel - sub) * mul, as the data
// loader computes it (core/data/transforms.h), laid out for an NCHW input.
#pragma once
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/data/transforms.h"
#include "core/tensor/shape.h"

namespace trainer::onnx_export {

struct InputNormalization {
  bool identity = true;                       // nothing to do (no mean, scale 1)
  // [] (a scalar), [C, 1, 1] or [C, H, W]: broadcast over the batch (OpenCV 4.6 refuses a leading 1)
  std::vector<int64_t> sub_dims, mul_dims;
  std::vector<float> sub, mul;                // empty: that step is left out
  std::string text;                           // "(pixel - per-channel mean) / std * scale (1)" for messages
};

// From the run's `data.augment` (mean kind, constant mean, scale) and the checkpoint's statistics
// (per_pixel / per_channel) for image input `hwc`. ConfigError naming the checkpoint when the
// statistics the augment section names are missing or of another shape.
InputNormalization input_normalization(const Augment& a, const CheckpointInfo& c, const Shape& hwc);

}  // namespace trainer::onnx_export
