// Learning-rate schedules: constant, poly (Keras per-epoch form or per step), step, cosine,
// exponential, each with an optional linear warmup.
#pragma once
#include <memory>
#include <string>

#include "core/io/config.h"

namespace trainer {

class Schedule {
 public:
  virtual ~Schedule() = default;
  // The learning rate for `epoch` (0-based) at fraction `progress` in [0, 1) through it.
  double lr(double base_lr, int epoch, double progress) const;
  // "cosine(min_factor=0)", with the warmup when there is one.
  std::string describe() const;

  int total_epochs = 1;
  double warmup_epochs = 0;     // linear from warmup_start * lr to lr over this many epochs
  double warmup_start = 0.0;
  // false: the warmup ramp multiplies the schedule, which runs from epoch 0 over total_epochs;
  // true: the schedule starts when the ramp ends and runs over the epochs left (Keras 3's
  // CosineDecay(warmup_steps, decay_steps = total - warmup), llm.c's and nanoGPT's).
  bool decay_after_warmup = false;
  bool per_step = false;        // false: the rate changes at epoch boundaries (Keras LearningRateScheduler)

 protected:
  // The factor applied to the base rate at time t (epochs, continuous or whole) of a schedule
  // that decays over `horizon` epochs.
  virtual double factor(double t, double horizon) const = 0;
  virtual std::string describe_type() const = 0;
};

// The `schedule:` section (absent: constant), read once: the type's parameters and the warmup.
struct ScheduleSpec {
  std::string type = "constant";  // constant | poly | step | cosine | exponential
  double power = 1.0;             // poly
  double every = 10.0;            // step: epochs between reductions
  double gamma = 0.1;             // step (default 0.1), exponential (default 0.95)
  double min_factor = 0.0;        // cosine
  bool per_step = false;
  double warmup_epochs = 0, warmup_start = 0;
  bool decay_after_warmup = false;
};
ScheduleSpec read_schedule(const cfg::Node& section);
// `epochs` is train.epochs.
std::unique_ptr<Schedule> make_schedule(const ScheduleSpec& spec, int epochs);

}  // namespace trainer
