// Watchdog: a thread that reads the progress board and, when a rank has stayed in one phase
// longer than train.watchdog_s, reports every rank's place once (who is stuck, who waits for it).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
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

class Watchdog {
 public:
  // Reads `board` every second (a tenth of the limit when that is shorter, at least 50 ms); once
  // some rank has been in its phase longer than limit_s + delay_s, calls on_stall (on the
  // watchdog's thread; it is expected not to return: it ends the job). delay_s lets process 0
  // report first, other processes only when it cannot.
  Watchdog(const ProgressBoard& board, double limit_s, double delay_s, std::function<void(const StallReport&)> on_stall);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop();
  const ProgressBoard& board_;
  double limit_s_, delay_s_;
  std::function<void(const StallReport&)> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainer
