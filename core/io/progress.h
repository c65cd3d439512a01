// Keras 3's console: "Epoch i/N" and a live progress bar on a terminal ("125/125 ━━━━━━━━━━━━━━━━━━━━
// 3s 28ms/step - accuracy: 0.5434 - loss: 1.3142"), one line per epoch otherwise ("Epoch 1/3 125/125
// ━━━━…"); every finished epoch line is also appended to the run's train.log.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

using Metrics = std::vector<std::pair<std::string, double>>;

class Progress {
 public:
  Progress(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  void set_log(std::FILE* log) { log_ = log; }
  void begin_epoch(int epoch, int epochs, int64_t steps);
  void update(int64_t step, const Metrics& m);  // after `step` steps of this epoch
  void end_epoch(const Metrics& m);              // train and val metrics together
  // A line printed outside the bar (start-up information, warnings).
  void line(const std::string& s);

  static std::string format_metrics(const Metrics& m);
  static std::string format_duration(double seconds);   // an ETA
  static std::string format_step_time(double seconds);  // "28ms/step"
  // "  7/125 ━━━━━━━…": the count right-aligned to the total's width, then 20 cells, the done ones
  // green and the rest grey when `colour` (a terminal).
  static std::string bar(int64_t step, int64_t steps, bool colour);

 private:
  double step_time(std::chrono::steady_clock::time_point now) const;
  std::FILE* out_;
  std::FILE* log_ = nullptr;
  bool terminal_;
  int epoch_ = 0, epochs_ = 0;
  int64_t steps_ = 0, step_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_, after_first_;
};

}  // namespace trainer
