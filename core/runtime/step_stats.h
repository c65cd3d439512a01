// A step's statistics as the step leaves them — known, or on their way back from the device — and
// the window of steps whose statistics the loops read a few steps late, so the host never waits for them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <deque>
#include <utility>

#include "core/dist/communicator.h"
#include "core/ops/context.h"
#include "core/ops/softmax.h"

namespace trainer {

// The statistics a program added up in memory, as the host reports them; an embedding's bad id or
// an out-of-range label the kernels noted thrown as the ordinary path throws them (`loss`: the
// loss kernel's name in the label's message).
LossStats stats_of_sums(const LossSums& sums, const char* loss);

// What reads a fixed step's results on the host in step order: the replica whose scale, skip
// counts, norm, optimizer count and moving average follow what each step decided where it ran.
class StepFollower {
 public:
  virtual ~StepFollower() = default;
  // Every step read back up to `ticket` (OpContext::read_back's) followed, once, oldest first.
  virtual void follow_through(uint64_t ticket) = 0;
};

// What a fixed step reports beside its statistics: its gradient norm (clipping on) and the loss
// scale after it (loss scaling on); NaN where not asked for.
struct ReportAsked {
  bool norm = false, scale = false;
};

class StepStats {
 public:
  StepStats() = default;
  StepStats(const LossStats& s) : known_(s) {}  // NOLINT: a step whose statistics are known
  // A fixed step's memory (StepMemory) read back as `ticket`; `follow` (may be null) makes the
  // host follow the steps up to it before they are reported. `ranks` > 0: the statistics are the
  // sum of that many ranks' LossSums gathered after the StepMemory (the job's); 0: its own sums.
  StepStats(OpContext& ctx, uint64_t ticket, const char* loss, StepFollower* follow = nullptr, ReportAsked r = {},
            int ranks = 0)
      : ctx_(&ctx), ticket_(ticket), loss_(loss), follow_(follow), report_(r), ranks_(ranks) {}

  bool pending() const { return ctx_ != nullptr; }
  // Several ranks' step: get() waits polling `c` (Communicator::check_abort), so that a peer's
  // failure ends the wait (its collectives in this step would never finish) instead of hanging it.
  void abort_with(Communicator* c) { abortable_ = c; }
  // Known, or landed on the host: get() will not wait.
  bool ready() const { return !ctx_ || ctx_->read_back_done(ticket_); }
  // The statistics, waiting for them where they have not landed (read once, then known).
  LossStats get();
  // Statistics of the step's known elsewhere (micro-batches that ran the ordinary way), added to
  // the read ones as HeldStats adds them.
  void add(const LossStats& s) {
    if (ctx_) added_ += s;
    else known_ += s;
  }
  // After get(): the step's gradient norm and the loss scale after it (NaN: not reported).
  double grad_norm() const { return norm_; }
  double loss_scale() const { return scale_; }
  // A known step's report, from the host's state right after it.
  void set_report(double norm, double scale) {
    norm_ = norm;
    scale_ = scale;
  }

 private:
  LossStats known_, added_;
  OpContext* ctx_ = nullptr;
  uint64_t ticket_ = 0;
  const char* loss_ = nullptr;
  StepFollower* follow_ = nullptr;
  ReportAsked report_;
  int ranks_ = 0;
  Communicator* abortable_ = nullptr;
  double norm_ = NAN, scale_ = NAN;
};

// Steps launched and not yet read, oldest first: each an `Entry` with a `StepStats stats`. A loop
// pushes each step it launches and then takes the entries that are due: the oldest while its
// statistics have landed, or while more than `lag` are unread (then waiting for the oldest), or
// all of them when the loop needs the device's state to be the last step's (a checkpoint, the
// epoch's end). The statistics stay in step order, so what a loop reports is what it reported
// when it read every step at once, a few steps later. A device context keeps
// OpContext::kReadBackSlots read-backs, so `lag` stays below that, with room for a pass's own.
template <class Entry>
class PendingSteps {
 public:
  static constexpr int kLag = 2;  // a GPU's steps in flight whose statistics are unread
  // `hold`: the test hook (LoopTestHooks::stats_lag), entries read only once `lag` newer ones are
  // pushed (or all), landed or not — the GPU's worst case on any backend.
  explicit PendingSteps(int lag = kLag, bool hold = false)
      : lag_(std::clamp(lag, 0, OpContext::kReadBackSlots / 2 - 1)), hold_(hold) {}
  void push(Entry e) {
    unread_ += e.stats.pending();
    q_.push_back(std::move(e));
  }
  // The oldest entry when it is due (see above), popped into `out`; false when none is. Only
  // entries still on their way count toward the lag (an accumulated step's earlier micro-batches
  // are known at once: a step's last carries their sums).
  bool next(Entry& out, bool all) {
    if (q_.empty()) return false;
    const StepStats& front = q_.front().stats;
    const bool due = all || unread_ > lag_ || !front.pending() || (!hold_ && front.ready());
    if (!due) return false;
    unread_ -= front.pending();
    out = std::move(q_.front());
    q_.pop_front();
    return true;
  }
  bool empty() const { return q_.empty(); }

 private:
  int lag_;
  bool hold_;
  int unread_ = 0;  // entries of q_ whose statistics are pending
  std::deque<Entry> q_;
};

// A loop's entry when all it keeps of a step is its statistics (evaluation, the bench).
struct StepRead {
  StepStats stats;
};
using StepReads = PendingSteps<StepRead>;

}  // namespace trainer
