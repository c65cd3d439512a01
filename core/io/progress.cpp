// Keras-style progress bar and epoch lines.
#include "core/io/progress.h"
#include "core/io/printable.h"

#include <fmt/format.h>

#include <cmath>

namespace trainer {

std::string Progress::format_metrics(const Metrics& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format(" - {}: {:.4f}", k, v);
  return s;
}

std::string Progress::format_duration(double s) {
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", int(s) / 3600, (int(s) / 60) % 60, int(s) % 60);
  if (s >= 60) return fmt::format("{}:{:02}", int(s) / 60, int(s) % 60);
  return fmt::format("{}s", int(std::lround(s)));
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
  if (terminal_) {
    std::fputs(fmt::format("Epoch {}/{}\n", epoch, epochs).c_str(), out_);
    std::fflush(out_);
  }
}

std::string Progress::bar(int64_t step) const {
  int width = int(std::to_string(steps_).size());
  std::string s = fmt::format("{:>{}}/{} [", step, width, steps_);
  const int len = 30;
  int done = steps_ > 0 ? int(len * step / steps_) : len;
  for (int i = 0; i < len; ++i) s += i < done ? '=' : (i == done && step < steps_ ? '>' : '.');
  if (done >= len) s.back() = '=';
  return s + "]";
}

void Progress::update(int64_t step, const Metrics& m) {
  step_ = step;
  if (!terminal_) return;
  auto now = std::chrono::steady_clock::now();
  if (step < steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double el = std::chrono::duration<double>(now - start_).count();
  double eta = step > 0 ? el / double(step) * double(steps_ - step) : 0;
  std::string s = "\r" + bar(step) + " - ETA: " + format_duration(eta) + format_metrics(m) + "\x1b[K";
  std::fputs(s.c_str(), out_);
  std::fflush(out_);
}

void Progress::end_epoch(const Metrics& m) {
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double per = step_ > 0 ? el / double(step_) : 0;
  std::string timing = fmt::format("{} {:.0f}ms/step", format_duration(el), per * 1000);
  std::string tail = bar(step_) + " - " + timing + format_metrics(m);
  if (terminal_) {
    std::fputs(("\r" + tail + "\x1b[K\n").c_str(), out_);
  } else {
    std::fputs(fmt::format("Epoch {}/{} {}\n", epoch_, epochs_, tail).c_str(), out_);
  }
  std::fflush(out_);
  if (log_) {
    std::fputs(fmt::format("Epoch {}/{} {}\n", epoch_, epochs_, tail).c_str(), log_);
    std::fflush(log_);
  }
  step_ = 0;
}

}  // namespace trainer
