// Keras-style console output: "Epoch i/N" and a live progress bar on a terminal, one line per
// epoch otherwise; every finished epoch line is also appended to the run's train.log.
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
  static std::string format_duration(double seconds);

 private:
  std::string bar(int64_t step) const;
  std::FILE* out_;
  std::FILE* log_ = nullptr;
  bool terminal_;
  int epoch_ = 0, epochs_ = 0;
  int64_t steps_ = 0, step_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace trainer
