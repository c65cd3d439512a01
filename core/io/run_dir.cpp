// Run directory creation, metrics.csv and metrics.jsonl (writing and reading back), small file writes.
#include "core/io/run_dir.h"
#include "core/io/json_text.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "core/io/config.h"
#include "core/io/file.h"

namespace fs = std::filesystem;

namespace trainer {

std::string create_run_dir(const std::string& root, const std::string& name, const std::string& explicit_dir) {
  std::error_code ec;
  if (!explicit_dir.empty()) {
    if (fs::exists(explicit_dir) && !fs::is_empty(explicit_dir, ec))
      throw cfg::ConfigError("--run-dir " + explicit_dir, "exists and is not empty; runs are never overwritten");
    fs::create_directories(explicit_dir, ec);
    if (ec) throw FileError(fmt::format("cannot create run directory {}: {}", explicit_dir, ec.message()));
    return explicit_dir;
  }
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  fs::path base = fs::path(root) / name;
  fs::create_directories(base, ec);
  if (ec) throw FileError(fmt::format("cannot create {}: {}", base.string(), ec.message()));
  for (int n = 1;; ++n) {
    fs::path p = base / (n == 1 ? std::string(stamp) : fmt::format("{}-{}", stamp, n));
    // create_directory is atomic: false when another run took the name first.
    if (fs::create_directory(p, ec)) return p.string();
    if (ec) throw FileError(fmt::format("cannot create {}: {}", p.string(), ec.message()));
  }
}

namespace {

std::FILE* open_for_writing(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw FileError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return f;
}

// One line, flushed; a short write or a failed flush (disk full, I/O error) throws.
void put_line(std::FILE* f, const std::string& path, const std::string& line) {
  errno = 0;
  if (std::fputs(line.c_str(), f) == EOF || std::fputc('\n', f) == EOF || std::fflush(f) != 0)
    throw FileError(fmt::format("cannot write {}: {}", path, std::strerror(errno ? errno : EIO)));
}

}  // namespace

MetricsLogger::MetricsLogger(Format format, const std::string& path, const MetricRows& initial)
    : format_(format), path_(path) {
  f_ = open_for_writing(path);
  try {
    for (const auto& [epoch, m] : initial) write(epoch, m);
  } catch (...) {
    std::fclose(f_);
    throw;
  }
}

MetricsLogger::~MetricsLogger() {
  if (f_) std::fclose(f_);
}

void MetricsLogger::write(int epoch, const Metrics& m) { put_line(f_, path_, row(epoch, m)); }

std::string MetricsLogger::row(int epoch, const Metrics& m) {
  if (format_ == Format::Jsonl) {
    JsonLine line = {{"epoch", epoch}};
    for (const auto& [k, v] : m) line[k] = v;  // NaN and infinities: null
    return json_line(line);
  }
  if (columns_.empty()) {
    std::string header = "epoch";
    for (const auto& [k, v] : m) {
      columns_.push_back(k);
      header += "," + k;
    }
    put_line(f_, path_, header);
  }
  std::string line = std::to_string(epoch);
  for (const std::string& c : columns_) {
    std::string cell;
    for (const auto& [k, v] : m)
      if (k == c) cell = fmt::format("{}", v);
    line += "," + cell;
  }
  return line;
}

MetricRows read_metrics_csv(const std::string& path) {
  // A row is at most a few hundred bytes: a million epochs' fit.
  const std::string text = read_text_file(path, uint64_t(256) << 20, "the most a metrics.csv may be");
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    size_t start = 0;
    for (size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1)
      cells.push_back(line.substr(start, comma - start));
    cells.push_back(line.substr(start));
    return cells;
  };
  MetricRows rows;
  std::vector<std::string> header;
  int lineno = 0;
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    ++lineno;
    std::string line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cells = split(line);
    if (header.empty()) {
      if (cells[0] != "epoch") throw FileError(fmt::format("{}:1: the header does not start with epoch", path));
      header = cells;
      continue;
    }
    if (cells.size() != header.size())
      throw FileError(fmt::format("{}:{}: {} cells, the header has {}", path, lineno, cells.size(), header.size()));
    auto number = [&](const std::string& cell, size_t col) {
      char* end = nullptr;
      double v = std::strtod(cell.c_str(), &end);
      if (end == cell.c_str() || *end != '\0')
        throw FileError(fmt::format("{}:{}: {} is not a number: '{}'", path, lineno, header[col], cell));
      return v;
    };
    double epoch = number(cells[0], 0);
    if (epoch != std::floor(epoch) || epoch < 0)
      throw FileError(fmt::format("{}:{}: epoch is not a whole number: '{}'", path, lineno, cells[0]));
    Metrics m;
    for (size_t c = 1; c < cells.size(); ++c)
      if (!cells[c].empty()) m.push_back({header[c], number(cells[c], c)});
    rows.push_back({int(epoch), std::move(m)});
  }
  return rows;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw FileError("cannot write " + path);
}

}  // namespace trainer
