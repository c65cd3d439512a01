// The training input normalisation from the run's augment section and the checkpoint's statistics.
#include "core/export/normalize.h"

#include <fmt/format.h>

#include "core/io/config.h"

namespace trainer::onnx_export {

InputNormalization input_normalization(const Augment& a, const CheckpointInfo& c, const Shape& hwc) {
  InputNormalization n;
  const int64_t H = hwc[0], W = hwc[1], C = hwc[2];
  NormStats s;
  if (a.needs_stats()) {
    s = checkpoint_stats(c);
    const bool per_pixel = a.mean == Augment::Mean::PerPixel;
    if (s.kind != a.mean)
      throw cfg::ConfigError(c.weights, fmt::format("the config normalises by the {} mean, but the checkpoint holds no "
                                                    "such statistics (normalization '{}')",
                                                    per_pixel ? "per_pixel" : "per_channel",
                                                    c.normalization.is_object() ? c.normalization.value("kind", "?") : "none"));
    const bool fits = per_pixel ? s.shape == hwc && s.mean.size() == size_t(H * W * C)
                                : s.mean.size() == size_t(C) && s.stddev.size() == size_t(C);
    if (!fits)
      throw cfg::ConfigError(c.weights, fmt::format("the checkpoint's normalisation statistics ({}) do not fit the "
                                                    "model's input {}", s.shape.str(), hwc.str()));
  }
  switch (a.mean) {
    case Augment::Mean::None:
      n.text = "pixel";
      break;
    case Augment::Mean::Constant:
      n.sub_dims = {};
      n.sub = {a.mean_value};
      n.text = fmt::format("(pixel - {})", a.mean_value);
      break;
    case Augment::Mean::PerPixel:  // the HWC mean image as [C, H, W]
      n.sub_dims = {C, H, W};
      n.sub.resize(size_t(C * H * W));
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
          for (int64_t ch = 0; ch < C; ++ch) n.sub[size_t((ch * H + y) * W + x)] = s.mean[size_t((y * W + x) * C + ch)];
      n.text = "(pixel - the training set's mean image)";
      break;
    case Augment::Mean::PerChannel:  // the loader's multiplier: scale * (1 / std), in float
      n.sub_dims = n.mul_dims = {C, 1, 1};
      n.sub = s.mean;
      for (int64_t ch = 0; ch < C; ++ch) n.mul.push_back(a.scale * (1.0f / s.stddev[size_t(ch)]));
      n.text = "(pixel - per-channel mean) / per-channel std";
      if (a.scale != 1.0f) n.text += fmt::format(" * {}", a.scale);
      break;
  }
  if (n.mul.empty() && a.scale != 1.0f) {
    n.mul_dims = {};
    n.mul = {a.scale};
    n.text += fmt::format(" * {}", a.scale);
  }
  n.identity = n.sub.empty() && n.mul.empty();
  return n;
}

}  // namespace trainer::onnx_export
