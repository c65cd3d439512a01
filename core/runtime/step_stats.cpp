// A program's loss sums as the statistics the host reports, and a fixed step's memory read back as its statistics and report.
#include "core/runtime/step_stats.h"

#include <fmt/format.h>

#include <stdexcept>

#include "core/optim/grad_clip.h"

namespace trainer {
namespace {

// The statistics a program added up in memory, as the host reports them; an out-of-range label the
// loss kernel noted thrown as the ordinary path throws it (`loss`: the loss kernel's name).
LossStats stats_of_sums(const LossSums& sums, const char* loss) {
  if (sums.bad_sample >= 0)
    throw std::out_of_range(fmt::format("{}: label {} (sample {}) is out of range for the model's output", loss,
                                        sums.bad_label, sums.bad_sample));
  return {sums.loss_sum, int64_t(sums.correct), int64_t(sums.count)};
}

}  // namespace

LossStats StepStats::get() {
  if (!ctx_) return known_;
  if (follow_) follow_->follow_through(ticket_);
  StepMemory m;
  std::memcpy(&m, ctx_->read_back_wait(ticket_), sizeof m);
  ctx_ = nullptr;
  // GradClip::begin's norm (none for a skipped step), LossScaler's scale after the step.
  if (report_.norm && !m.scalars.skip) norm_ = GradClip::norm_of(m.check.sum_squares, m.scalars.unscale);
  if (report_.scale) scale_ = double(m.state.scale);
  known_ = stats_of_sums(m.sums, loss_);
  known_ += added_;
  return known_;
}

}  // namespace trainer
