// Keras 3's progress bar and epoch lines (keras/src/utils/progbar.py): 20 cells of ━, ETA or elapsed seconds, time per step, metrics.
#include "core/io/progress.h"
#include "core/io/printable.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace trainer {

// " - name: 0.1234" each, 4 decimals, or 4 significant digits in exponent form at or below 1e-3.
std::string Progress::format_metrics(const Metrics& m) {
  std::string s;
  for (const auto& [k, v] : m) s += std::abs(v) > 1e-3 ? fmt::format(" - {}: {:.4f}", k, v) : fmt::format(" - {}: {:.4e}", k, v);
  return s;
}

// The ETA's form: 1:02:03, 2:05, 42s.
std::string Progress::format_duration(double s) {
  if (s > 3600) return fmt::format("{}:{:02}:{:02}", int(s) / 3600, (int(s) % 3600) / 60, int(s) % 60);
  if (s > 60) return fmt::format("{}:{:02}", int(s) / 60, int(s) % 60);
  return fmt::format("{}s", int(s));
}

// "28ms/step": whole seconds at or above 1 s (and for 0), milliseconds, else microseconds.
std::string Progress::format_step_time(double s) {
  if (s >= 1 || s == 0) return fmt::format("{:.0f}s/step", s);
  if (s >= 1e-3) return fmt::format("{:.0f}ms/step", s * 1e3);
  return fmt::format("{:.0f}us/step", s * 1e6);
}

void Progress::line(const std::string& text) {
  const std::string s = printable(text);  // names inside stay on one line
  if (terminal_ && step_ > 0 && step_ < steps_) std::fputs("\n", out_);
  std::fputs((s + "\n").c_str(), out_);
  std::fflush(out_);
  if (log_) {
    std::fputs((s + "\n").c_str(), log_);
    std::fflush(log_);
  }
}

void Progress::begin_epoch(int epoch, int epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  step_ = 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
  after_first_ = start_;
  if (terminal_) {
    std::fputs(fmt::format("Epoch {}/{}\n", epoch, epochs).c_str(), out_);
    std::fflush(out_);
  }
}

std::string Progress::bar(int64_t step, int64_t steps, bool colour) {
  const int width = int(std::to_string(steps).size()), cells = 20;
  const int done = steps > 0 ? int(std::min<int64_t>(cells * step / steps, cells)) : cells;
  std::string on, off;
  for (int i = 0; i < cells; ++i) (i < done ? on : off) += "\u2501";  // ━
  if (colour) return fmt::format("\x1b[1m{:>{}}/{}\x1b[0m \x1b[32m{}\x1b[0m\x1b[37m{}\x1b[0m", step, width, steps, on, off);
  return fmt::format("{:>{}}/{} {}{}", step, width, steps, on, off);
}

// Time per step as Keras estimates it: the first step (warm-up, allocation) left out once there
// are more.
double Progress::step_time(std::chrono::steady_clock::time_point now) const {
  if (step_ <= 0) return 0;
  if (step_ > 1 && after_first_ > start_)
    return std::chrono::duration<double>(now - after_first_).count() / double(step_ - 1);
  return std::chrono::duration<double>(now - start_).count() / double(step_);
}

void Progress::update(int64_t step, const Metrics& m) {
  auto now = std::chrono::steady_clock::now();
  if (step == 1 && step_ < 1) after_first_ = now;
  step_ = step;
  if (!terminal_) return;
  if (step < steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double per = step_time(now);
  const std::string s = "\r" + bar(step, steps_, true) + " " + format_duration(per * double(steps_ - step)) + " " +
                        format_step_time(per) + format_metrics(m) + "\x1b[K";
  std::fputs(s.c_str(), out_);
  std::fflush(out_);
}

void Progress::end_epoch(const Metrics& m) {
  const auto now = std::chrono::steady_clock::now();
  const double el = std::chrono::duration<double>(now - start_).count();
  const std::string timing = fmt::format(" {:.0f}s {}", el, format_step_time(step_time(now))) + format_metrics(m);
  if (terminal_) {
    std::fputs(("\r" + bar(step_, steps_, true) + timing + "\x1b[K\n").c_str(), out_);
  } else {
    std::fputs(fmt::format("Epoch {}/{} {}{}\n", epoch_, epochs_, bar(step_, steps_, false), timing).c_str(), out_);
  }
  std::fflush(out_);
  if (log_) {
    std::fputs(fmt::format("Epoch {}/{} {}{}\n", epoch_, epochs_, bar(step_, steps_, false), timing).c_str(), log_);
    std::fflush(log_);
  }
  step_ = 0;
}

}  // namespace trainer
