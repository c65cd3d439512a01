// The evaluation loop every trainee shares.
#include "core/runtime/trainee.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/runtime/interrupt.h"
#include "core/runtime/progress.h"

namespace trainer {

void bind_optimizer(Optimizer& o, OpContext& ctx, const ParamStore& ps) {
  o.bind(ctx, ps.trainable_weights(), ps.trainable_grads());
  // Each span runs to the next parameter's offset (its alignment padding, zeros that no update
  // changes, included), so neighbouring excluded parameters merge into one undecayed piece.
  std::vector<NamedSpan> spans;
  const auto& entries = ps.entries();
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].spec.trainable) {
      const bool next = i + 1 < entries.size() && entries[i + 1].spec.trainable;
      spans.push_back({entries[i].name, entries[i].offset, next ? entries[i + 1].offset : ps.trainable_floats()});
    }
  o.exclude_from_decay(spans);
}

namespace {

// Test hook: TRAINER_TEST_SLOW_VALIDATION=<ms> makes each batch of a training run's validation
// take that much longer, after one "test hook: validating" line, so a test can signal it there.
int slow_validation_ms() {
  const char* v = std::getenv("TRAINER_TEST_SLOW_VALIDATION");
  return v ? std::atoi(v) : 0;
}

}  // namespace

LossStats Trainee::evaluate(Loader& loader, const Predictions& predictions, bool* cut) {
  const int slow = cut ? slow_validation_ms() : 0;
  if (slow > 0 && rank() == 0) std::fprintf(stderr, "test hook: validating (%d ms a batch)\n", slow), std::fflush(stderr);
  LossStats total;
  // Each batch's statistics added once landed (a recorded program's are read back behind it).
  StepReads pending;
  StepRead done;
  std::vector<int32_t> predicted;
  loader.start_epoch(0);
  Batch b;
  bool stopped = false;
  int batch = 0;
  while (!(stopped = cut && interrupted()) && loader.next(b)) {
    mark_phase(rank(), Phase::Validation, ++batch);
    if (b.size == 0) continue;
    pending.push({eval_batch(b, predictions ? &predicted : nullptr)});
    while (pending.next(done, false)) total += done.stats.get();
    if (predictions) predictions(b, predicted);
    if (slow > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow));
  }
  while (pending.next(done, true)) total += done.stats.get();
  mark_phase(rank(), Phase::StepEnd);
  LossStats sums = sum_over_ranks(total);
  if (cut) *cut = sum_over_ranks(LossStats{0, stopped ? 1 : 0, 0}).correct > 0;  // one verdict for every rank
  return sums;
}

LossStats Trainee::sum_over_ranks(const LossStats& s) {
  if (!ctl_) return s;
  std::vector<double> v{s.loss_sum, double(s.correct), double(s.count)};
  ctl_->all_reduce_host(v);
  return {v[0], int64_t(v[1]), int64_t(v[2])};
}

LossStats Trainee::agree(const LossStats& s, bool& stop) {
  if (!ctl_) return s;
  std::vector<double> v{s.loss_sum, double(s.correct), double(s.count), stop ? 1.0 : 0.0, asks_.read ? 1.0 : 0.0};
  ctl_->all_reduce_host(v);
  stop = v[3] > 0;
  asks_.read = v[4] > 0;
  return {v[0], int64_t(v[1]), int64_t(v[2])};
}

}  // namespace trainer
