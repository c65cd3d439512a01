// Run directory creation, metrics.csv, small file writes.
#include "core/io/run_dir.h"

#include <fmt/format.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace fs = std::filesystem;

namespace trainer {

std::string create_run_dir(const std::string& root, const std::string& name, const std::string& explicit_dir) {
  std::error_code ec;
  if (!explicit_dir.empty()) {
    if (fs::exists(explicit_dir) && !fs::is_empty(explicit_dir, ec))
      throw std::runtime_error(fmt::format("run directory {} exists and is not empty; runs are never overwritten", explicit_dir));
    fs::create_directories(explicit_dir, ec);
    if (ec) throw std::runtime_error(fmt::format("cannot create run directory {}: {}", explicit_dir, ec.message()));
    return explicit_dir;
  }
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  fs::path base = fs::path(root) / name;
  fs::create_directories(base, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create {}: {}", base.string(), ec.message()));
  for (int n = 1;; ++n) {
    fs::path p = base / (n == 1 ? std::string(stamp) : fmt::format("{}-{}", stamp, n));
    // create_directory is atomic: false when another run took the name first.
    if (fs::create_directory(p, ec)) return p.string();
    if (ec) throw std::runtime_error(fmt::format("cannot create {}: {}", p.string(), ec.message()));
  }
}

CsvLogger::CsvLogger(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) throw std::runtime_error("cannot write " + path);
}

CsvLogger::~CsvLogger() {
  if (f_) std::fclose(f_);
}

void CsvLogger::write(int epoch, const Metrics& m) {
  if (columns_.empty()) {
    std::string header = "epoch";
    for (const auto& [k, v] : m) {
      columns_.push_back(k);
      header += "," + k;
    }
    std::fputs((header + "\n").c_str(), f_);
  }
  std::string row = std::to_string(epoch);
  for (const std::string& c : columns_) {
    std::string cell;
    for (const auto& [k, v] : m)
      if (k == c) cell = fmt::format("{}", v);
    row += "," + cell;
  }
  std::fputs((row + "\n").c_str(), f_);
  std::fflush(f_);
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace trainer
