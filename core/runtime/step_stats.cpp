// A program's loss sums as the statistics the host reports, and a fixed step's memory read back as its statistics and report.
#include "core/runtime/step_stats.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <stdexcept>

#include "core/ops/embedding.h"
#include "core/optim/grad_clip.h"

namespace trainer {

LossStats stats_of_sums(const LossSums& sums, const char* loss) {
  if (sums.bad_id_at >= 0) throw std::runtime_error(embedding::bad_id_message(sums));  // as EmbeddingKernel's now
  if (sums.bad_sample >= 0)
    throw std::out_of_range(fmt::format("{}: label {} (sample {}) is out of range for the model's output", loss,
                                        sums.bad_label, sums.bad_sample));
  return {sums.loss_sum, int64_t(sums.correct), int64_t(sums.count)};
}

LossStats StepStats::get() {
  if (!ctx_) return known_;
  // Polled, not a blocking wait (uncounted: the host waits here for a step two behind, the GPU busy).
  for (int spins = 0; abortable_ && !ctx_->read_back_done(ticket_); ++spins) {
    abortable_->check_abort();
    if (spins < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (follow_) follow_->follow_through(ticket_);
  const char* bytes = static_cast<const char*>(ctx_->read_back_wait(ticket_));
  StepMemory m;
  std::memcpy(&m, bytes, sizeof m);
  // GradClip::begin's norm (none for a skipped step), LossScaler's scale after the step.
  if (report_.norm && !m.scalars.skip) norm_ = GradClip::norm_of(m.check.sum_squares, m.scalars.unscale);
  if (report_.scale) scale_ = double(m.state.scale);
  if (ranks_ == 0) {
    known_ = stats_of_sums(m.sums, loss_);
  } else {  // every rank's, gathered after StepMemory: added in rank order, as the host exchange adds them
    const char* slots = bytes + sizeof(StepMemory);
    known_ = LossStats{};
    for (int r = 0; r < ranks_; ++r) {
      LossSums one;
      std::memcpy(&one, slots + size_t(r) * sizeof(LossSums), sizeof one);
      known_ += stats_of_sums(one, loss_);
    }
  }
  known_ += added_;
  ctx_ = nullptr;
  return known_;
}

}  // namespace trainer
