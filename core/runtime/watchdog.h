// Watchdog: a thread that reads the progress board and, when a rank has stayed in one phase
// longer than train.watchdog_s, reports every rank's place once (who is stuck, who waits for it).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <cstdint>
#include <vector>

#include "core/runtime/progress.h"

namespace trainer {

struct StallReport {
  std::vector<std::string> lines;  // one per rank: "watchdog: rank 1 (process 1, pid 42, stopped): step 41, forward, for 10.2 s"
  std::string summary;             // the exit line: "stalled: no progress for 10.2 s (train.watchdog_s 10): rank 1 ..."
  int stuck_rank = -1;             // the rank that stopped first (longest in its phase)
};

// The report for `places` (a board's read()) with `limit_s`: null stuck_rank when none is over it.
// `local` ranks per process name each rank's process.
StallReport stall_report(const std::vector<RankPlace>& places, double limit_s, int local);

// The job's typical step time from the progress board's step counts seen over time: over the last
// 31 intervals in which the slowest rank advanced, the median step (each interval's seconds per step,
// counted once for each step it held). An interval that held a validation, a checkpoint or the
// start is one slow step among many fast ones, however few intervals a short run has (a median of
// intervals let one such 1-step interval of 4 decide it: CI 2026-12-01, no warning before the abort).
class StepClock {
 public:
  void observe(double t_s, int64_t step);  // `step`: the slowest used rank's
  double median_s() const;                 // 0 until a step was seen to complete
  // The median without the newest sample (when there are two or more): what a stall's warning
  // uses. The interval in which the slowest rank last advanced runs into the stall when one began
  // (2 steps "in" a 0.2 s period of which the second is the held one), and with few samples (a short
  // run before the stall) that one sample could decide the median.
  double median_before_last_s() const;

 private:
  struct Interval {
    double per_step_s;
    int64_t steps;
  };
  static double median_of(std::vector<Interval> v);
  double last_t_ = 0;
  int64_t last_step_ = -1;
  std::vector<Interval> per_step_;  // a ring of the last 31
  size_t next_ = 0;
};

// When a rank that stays in one phase is worth a warning, before the abort at limit_s (Horovod's
// stall check): 20 times the median step, at least 30 s (a quarter of the limit when that is
// shorter). 0 when the warning would not come before the limit.
double stall_warning_after(double median_step_s, double limit_s);

// The early warnings: one line to `say` per stall (a rank, its step and phase) after
// stall_warning_after(the median step, the limit), for the ranks [first, first + count). With
// first > 0 (a process other than the job's first), only while rank 0 is not on the board: where
// process 0 shares the board, it warns for every rank it sees.
struct StallWarnings {
  std::function<void(const std::string&)> say;  // null: no warnings
  int first = 0, count = 0;
};

class Watchdog {
 public:
  // Reads `board` every second (a tenth of the limit when that is shorter, at least 50 ms); once
  // some rank has been in its phase longer than limit_s + delay_s, calls on_stall (on the
  // watchdog's thread; it is expected not to return: it ends the job). delay_s lets process 0
  // report first, other processes only when it cannot.
  Watchdog(const ProgressBoard& board, double limit_s, double delay_s, std::function<void(const StallReport&)> on_stall,
           StallWarnings warn = {});
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop();
  const ProgressBoard& board_;
  double limit_s_, delay_s_;
  std::function<void(const StallReport&)> on_stall_;
  StallWarnings warn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainer
