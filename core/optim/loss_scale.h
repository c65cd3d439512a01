// Loss scaling for low-precision training: the `train.loss_scale` setting and the scaler that
// follows PyTorch's GradScaler (dynamic: back off on a non-finite gradient, grow after a run of finite steps).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "core/io/config.h"
#include "core/ops/context.h"
#include "core/ops/step_scalars.h"

namespace trainer {

// `train.loss_scale`: none | dynamic | <positive number> (a static scale) | a mapping with
// GradScaler's options (dynamic): {init_scale: 65536, growth_factor: 2, backoff_factor: 0.5,
// growth_interval: 2000}. Default: dynamic for fp16, none otherwise.
struct LossScaleOptions {
  enum class Mode { None, Static, Dynamic };
  Mode mode = Mode::None;
  double init_scale = 65536.0;  // 2^16, as GradScaler
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled() const { return mode != Mode::None; }
  std::string describe() const;  // "dynamic (init 65536, x2 every 2000 finite steps, x0.5 on overflow)"
};

// Reads `node` (undefined: the default for `precision`); config errors name its file:line:col.
LossScaleOptions read_loss_scale(const cfg::Node& node, Precision precision);

// One trainee's scaler. Every replica (every stage) holds one and feeds it the same decisions,
// so all keep the same scale. Per step: the loss gradient is multiplied by scale(); after the
// gradient all-reduce, the gradients are checked; finite: the update runs with grad_scale
// 1/scale() (exact when the scale is a power of two); not finite: no update (weights, optimizer
// state and its step count unchanged) and the step is counted as skipped. Then update(finite).
class LossScaler {
 public:
  LossScaler() = default;
  explicit LossScaler(const LossScaleOptions& o);

  bool enabled() const { return o_.enabled(); }
  float scale() const { return enabled() ? float(scale_) : 1.0f; }
  // After a step's gradient check (the scale used for that step is scale() before the call).
  // Dynamic: not finite -> scale x backoff_factor; growth_interval finite steps in a row ->
  // scale x growth_factor (kept when the product would overflow a float, as GradScaler).
  void update(bool finite);

  // How the scale moves (a fixed step moves it on the device with the same arithmetic).
  StateRule rule() const;
  int64_t good_steps() const { return good_steps_; }
  int64_t skipped_total() const { return skipped_total_; }
  int64_t skipped_in_epoch() const { return skipped_epoch_; }
  void begin_epoch() { skipped_epoch_ = 0; }

  // For the checkpoint sidecar: the scale, the finite-step run and the skip counters.
  nlohmann::json state() const;
  void restore(const nlohmann::json& j);  // null or empty: keep the initial state

 private:
  LossScaleOptions o_;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;  // finite steps since the last change (GradScaler's growth tracker)
  int64_t skipped_total_ = 0, skipped_epoch_ = 0;
};

}  // namespace trainer
