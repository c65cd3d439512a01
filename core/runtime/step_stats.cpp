// A program's loss sums as the statistics the host reports.
#include "core/runtime/step_stats.h"

#include <fmt/format.h>

#include <stdexcept>

namespace trainer {

LossStats stats_of_sums(const LossSums& sums, const char* loss) {
  if (sums.bad_sample >= 0)
    throw std::out_of_range(fmt::format("{}: label {} (sample {}) is out of range for the model's output", loss,
                                        sums.bad_label, sums.bad_sample));
  return {sums.loss_sum, int64_t(sums.correct), int64_t(sums.count)};
}

}  // namespace trainer
