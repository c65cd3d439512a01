// Run directories (runs/<name>/<YYYYmmdd-HHMMSS>[-N], never overwritten), metrics.csv and
// metrics.jsonl. Both metric files number epochs from 0, as Keras' CSVLogger does.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/io/progress.h"

namespace trainer {

// Creates a fresh run directory: `explicit_dir` when given (it must not exist or be empty),
// else root/name/stamp with -2, -3, ... appended when taken. A non-empty explicit_dir is a
// ConfigError ("--run-dir DIR: ...", exit 2); a directory that cannot be created a FileError.
std::string create_run_dir(const std::string& root, const std::string& name, const std::string& explicit_dir);

// One epoch's metrics as metrics.csv holds them: (0-based epoch, name -> value).
using MetricRows = std::vector<std::pair<int, Metrics>>;

// A metrics file, one row per epoch (epochs numbered from 0, as Keras' CSVLogger), in one of two
// formats:
//   Csv:   Keras CSVLogger: a header (epoch first, then the metric names of the first row written,
//          in their order) and one row per epoch; a later row's missing metric is an empty cell,
//          an extra one is dropped.
//   Jsonl: one JSON object per epoch and line, {"epoch": 0, <each metric in order>}, e.g.
//          {"epoch": 0, "accuracy": 0.91, "loss": 0.27, "lr": 0.003, "val_accuracy": 0.9,
//          "val_loss": 0.3, "time_s": 12.5}; NaN and infinities are written as null.
// `initial` rows (a resumed run's earlier epochs, from read_metrics_csv) are written first,
// exactly as if write() had been called for each. Every row is flushed; a failed write (disk
// full) throws FileError (core/io/file.h) naming the file and the system's reason.
class MetricsLogger {
 public:
  enum class Format { Csv, Jsonl };
  MetricsLogger(Format format, const std::string& path, const MetricRows& initial = {});
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;
  void write(int epoch, const Metrics& m);

 private:
  std::string row(int epoch, const Metrics& m);  // the format's line (a CSV header first, once)
  Format format_;
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<std::string> columns_;  // CSV
};

// The rows of a metrics.csv that MetricsLogger (Csv) wrote, in file order. An empty cell leaves that
// metric out of its row; "nan"/"inf" read as such. A last line without its newline (a write cut
// short) is ignored. Throws FileError naming the file (and line) when it cannot be read
// or a row does not parse.
MetricRows read_metrics_csv(const std::string& path);

void write_text_file(const std::string& path, const std::string& text);

}  // namespace trainer
