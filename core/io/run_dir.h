// Run directories (runs/<name>/<YYYYmmdd-HHMMSS>[-N], never overwritten) and metrics.csv.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "core/io/progress.h"

namespace trainer {

// Creates a fresh run directory: `explicit_dir` when given (it must not exist or be empty),
// else root/name/stamp with -2, -3, ... appended when taken.
std::string create_run_dir(const std::string& root, const std::string& name, const std::string& explicit_dir);

// Keras CSVLogger: a header (epoch first, then the metric names) and one row per epoch.
class CsvLogger {
 public:
  explicit CsvLogger(const std::string& path);
  ~CsvLogger();
  CsvLogger(const CsvLogger&) = delete;
  CsvLogger& operator=(const CsvLogger&) = delete;
  void write(int epoch, const Metrics& m);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<std::string> columns_;
};

void write_text_file(const std::string& path, const std::string& text);

}  // namespace trainer
