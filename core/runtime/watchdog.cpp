// The watchdog's thread and its report: each rank's place, the stuck one named with its process's state.
#include "core/runtime/watchdog.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <tuple>

namespace trainer {
namespace {

// "stopped" (SIGSTOP, a debugger), "gone" (exited or killed), or "" (running) — from /proc, so
// for processes of this machine.
std::string process_state(int pid) {
  if (pid <= 0) return "";
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!in || !std::getline(in, s)) return "gone";
  const size_t close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return "";
  const char state = s[close + 2];
  if (state == 'T' || state == 't') return "stopped";
  if (state == 'Z' || state == 'X') return "gone";
  return "";
}

// "rank 1 (process 1, pid 42, stopped)".
std::string who(const RankPlace& p, int local) {
  const std::string state = process_state(p.pid);
  return fmt::format("rank {} (process {}, pid {}{})", p.rank, p.rank / std::max(local, 1), p.pid,
                     state.empty() ? "" : ", " + state);
}

}  // namespace

StallReport stall_report(const std::vector<RankPlace>& places, double limit_s, int local) {
  StallReport r;
  // The one that stopped the others: a rank whose process is stopped or gone first, then one that
  // is not waiting for the others (in a collective), then the longest in its phase.
  auto rank_of = [](const RankPlace& p) {
    const std::string state = process_state(p.pid);
    const bool waiting = waits_for_others(p.phase);
    return std::make_tuple(!state.empty(), !waiting, p.seconds);
  };
  const RankPlace* stuck = nullptr;
  bool over = false;
  for (const RankPlace& p : places) over = over || (p.used && p.seconds > limit_s);
  if (!over) return r;
  for (const RankPlace& p : places)
    if (p.used && (!stuck || rank_of(p) > rank_of(*stuck))) stuck = &p;
  r.stuck_rank = stuck->rank;
  for (const RankPlace& p : places) {
    if (!p.used) {
      r.lines.push_back(fmt::format("watchdog: rank {}: not on this machine's board (a process of another machine, or one "
                                    "that has not started training)", p.rank));
      continue;
    }
    r.lines.push_back(fmt::format("watchdog: {}: step {}, {}, for {:.1f} s{}", who(p, local), p.step, phase_text(p.phase, p.a, p.b),
                                  p.seconds, &p == stuck ? " <- no progress" : ""));
  }
  const std::string state = process_state(stuck->pid);
  int waiting = 0;
  for (const RankPlace& p : places) waiting += &p != stuck && waits_for_others(p.phase);
  r.summary = fmt::format("stalled: no progress for {:.1f} s (train.watchdog_s {:g}): rank {} at step {}: {}{}{}",
                          stuck->seconds, limit_s, stuck->rank, stuck->step, phase_text(stuck->phase, stuck->a, stuck->b),
                          state.empty() ? "" : fmt::format("; its process (pid {}) is {}", stuck->pid, state),
                          waiting == 0 ? "" : waiting == 1 ? "; another rank waits for it" : fmt::format("; {} ranks wait for it", waiting));
  return r;
}

void StepClock::observe(double t_s, int64_t step) {
  if (last_step_ >= 0 && step > last_step_) {
    const Interval in{(t_s - last_t_) / double(step - last_step_), step - last_step_};
    if (per_step_.size() < 31) per_step_.push_back(in);
    else per_step_[next_++ % 31] = in;
  }
  if (last_step_ < 0 || step != last_step_) {
    last_step_ = step;
    last_t_ = t_s;
  }
}

double StepClock::median_of(std::vector<Interval> v) {
  // The step past half of them all (the upper median, as v[n / 2] of n equal intervals).
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.per_step_s < b.per_step_s; });
  int64_t total = 0;
  for (const Interval& i : v) total += i.steps;
  int64_t seen = 0;
  for (const Interval& i : v)
    if (2 * (seen += i.steps) > total) return i.per_step_s;
  return 0;
}

double StepClock::median_s() const { return median_of(per_step_); }

double StepClock::median_before_last_s() const {
  if (per_step_.size() < 2) return median_s();
  std::vector<Interval> v = per_step_;
  const size_t newest = per_step_.size() < 31 ? per_step_.size() - 1 : (next_ + 30) % 31;
  v.erase(v.begin() + long(newest));
  return median_of(std::move(v));
}

double stall_warning_after(double median_step_s, double limit_s) {
  const double at = std::max(20 * median_step_s, std::min(30.0, limit_s / 4));
  return at < limit_s ? at : 0;
}

Watchdog::Watchdog(const ProgressBoard& board, double limit_s, double delay_s, std::function<void(const StallReport&)> on_stall,
                   StallWarnings warn)
    : board_(board), limit_s_(limit_s), delay_s_(delay_s), on_stall_(std::move(on_stall)), warn_(std::move(warn)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::loop() {
  // Signals are taken by the main thread (interrupt.h); this one only watches.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const double period = std::clamp(limit_s_ / 10.0, 0.05, 1.0);
  StepClock clock;
  std::set<std::tuple<int, int64_t, int, int>> warned;  // rank, step, phase, detail: once per stall
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(period), [&] { return stop_; })) {
    const std::vector<RankPlace> places = board_.read();
    int64_t slowest = -1;
    for (const RankPlace& p : places)
      if (p.used) slowest = slowest < 0 ? p.step : std::min(slowest, p.step);
    if (slowest >= 0) clock.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), slowest);
    const bool rank0_seen = warn_.first > 0 && !places.empty() && places[0].used;
    const double step_s = clock.median_before_last_s();
    const double warn_at = warn_.say && !rank0_seen ? stall_warning_after(step_s, limit_s_) : 0;
    for (const RankPlace& p : places) {
      if (warn_at <= 0 || !p.used || p.seconds <= warn_at || p.rank < warn_.first || p.rank >= warn_.first + warn_.count) continue;
      if (!warned.insert({p.rank, p.step, int(p.phase), p.a}).second) continue;
      warn_.say(fmt::format("watchdog: warning: {} has been in {} at step {} for {:.1f} s{}; the job ends if it makes no "
                            "progress for train.watchdog_s {:g} s",
                            who(p, board_.local()), phase_text(p.phase, p.a, p.b), p.step, p.seconds,
                            step_s > 0 ? fmt::format(" (a step takes {:.3g} s)", step_s) : "", limit_s_));
    }
    bool over = false;
    for (const RankPlace& p : places) over = over || (p.used && p.seconds > limit_s_ + delay_s_);
    if (!over) continue;
    StallReport r = stall_report(places, limit_s_, board_.local());
    lock.unlock();
    on_stall_(r);  // ends the job
    return;
  }
}

}  // namespace trainer
