// The evaluation loop every trainee shares.
#include "core/runtime/trainee.h"

namespace trainer {

LossStats Trainee::evaluate(Loader& loader, const Predictions& predictions) {
  LossStats total;
  std::vector<int32_t> predicted;
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) {
    if (b.size == 0) continue;
    total += eval_batch(b, predictions ? &predicted : nullptr);
    if (predictions) predictions(b, predicted);
  }
  return sum_over_ranks(total);
}

}  // namespace trainer
