// The one training step of every strategy (Trainee::train_step): a micro-batch's forward and
// backward, and on a step's last the reduction, the update, the buffers and the agreement.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "core/runtime/progress.h"
#include "core/runtime/trainee.h"

namespace trainer {

StepStats Trainee::step(const Batch& b, float lr, uint64_t seed, bool& stop, const MicroStep& m, bool* read_all) {
  if (m.count > accumulate_ || m.index < 0 || m.index >= m.count)
    throw std::logic_error(fmt::format("micro-batch {} of {} (train.accumulate {})", m.index, m.count, accumulate_));
  mark_phase(rank(), Phase::Forward);
  start_average();
  // The loss gradient is divided by the step's scored labels over every rank and micro-batch (one
  // per sample, or per position less the ignored ones: scored_labels), so that the reduced sum is
  // the gradient of the mean loss over the global batch (averaging needs no pass of its own) and k
  // micro-batches of b train as one batch of k·b; with loss scaling it is also multiplied by the
  // scale (exactly, for a power of two).
  const int64_t scored = m.scored > 0 ? m.scored : scored_labels(b);
  const float inv_scored = scored > 0 ? 1.0f / float(scored) : 0.0f;
  // The ordinary step's factor, from the host's scale: current once fixed_step declined (it
  // follows every step it left unread first). A fixed program derives it where it runs.
  auto grad_scale = [&] { return inv_scored * update_.loss_scale(); };
  if (!m.last()) {  // an earlier micro-batch: its gradients held, its statistics and stop kept for the last
    asks_ = {};
    if (read_all) *read_all = false;
    const Grads g = m.index == 0 ? Grads::HoldFirst : Grads::Hold;
    StepStats fixed;
    const LossStats s = fixed_step(b, lr, seed, inv_scored, g, fixed) ? fixed.get() : forward_backward(b, seed, grad_scale(), g);
    held_stats_.hold(s, stop);
    return LossStats{};
  }
  const Grads g = m.count > 1 ? Grads::AddHeld : Grads::Reduce;
  asks_ = {stop || held_stats_.stop, read_all && *read_all};
  StepStats out;
  if (StepStats fixed; fixed_step(b, lr, seed, inv_scored, g, fixed)) {  // reduction, update and buffers inside the program
    if (fixed.pending()) {  // read later: one replica; or several, whose sums the program gathered
      LossStats held;       // earlier micro-batches that ran the ordinary way (the programs' sums are in `fixed`)
      held_stats_.release(held, stop);
      if (ranks() > 1) {  // the asks agreed as the program started (several ranks defer only steps of programs alone)
        if (held.count != 0) throw std::logic_error("a step read later holds statistics of its rank alone");
        stop = asks_.stop;
      }
      fixed.add(held);
      if (read_all) *read_all = asks_.read;
      return fixed;
    }
    LossStats s = fixed.get();
    held_stats_.release(s, stop);
    if (ctl_ && ctl_->size() > 1) mark_phase(rank(), Phase::StepEnd);
    out = ctl_ && ctl_->size() > 1 ? agree(s, stop) : s;  // one replica: its statistics are the job's
  } else {
    LossStats s = forward_backward(b, seed, grad_scale(), g);
    held_stats_.release(s, stop);
    reduce_and_update(lr);
    after_update();
    out = agree(s, stop);
  }
  if (read_all) *read_all = asks_.read;
  // Read now: the host's norm and scale are this step's.
  out.set_report(update_.clip().enabled() ? update_.clip().grad_norm() : NAN,
                 update_.scaler().enabled() ? double(update_.scaler().scale()) : NAN);
  return out;
}

}  // namespace trainer
