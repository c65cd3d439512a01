// Shared by the libFuzzer targets: a scratch directory, fuzz bytes as files, datasets opened from YAML, drained.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/io/config.h"
#include "core/io/file.h"

namespace fuzz {

// A directory of this process's own, created on first use and removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trainer-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    static const std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Writes `size` bytes to scratch_dir()/name (parent folders created) and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = std::filesystem::path(scratch_dir()) / name;
  std::filesystem::create_directories(p.parent_path());
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
  return p.string();
}

// Two files from one input: its first two bytes (little-endian) are the first file's length
// (clamped), the rest of the input after them is the first file and then the second.
struct Split {
  const uint8_t *first = nullptr, *second = nullptr;
  size_t first_size = 0, second_size = 0;
};
inline Split split(const uint8_t* data, size_t size) {
  Split s;
  if (size < 2) return s;
  const size_t rest = size - 2;
  s.first = data + 2, s.first_size = std::min<size_t>(rest, size_t(data[0]) | size_t(data[1]) << 8);
  s.second = s.first + s.first_size, s.second_size = rest - s.first_size;
  return s;
}

// The dataset a YAML spec describes (relative paths under scratch_dir()), with a small
// data.max_image_mb so the decoders' refusals are exercised rather than the machine's memory.
inline std::shared_ptr<trainer::Dataset> open_dataset(const std::string& yaml, uint64_t max_image_bytes = 4 << 20) {
  auto doc = trainer::cfg::parse_document(yaml, "fuzz.yaml");
  trainer::DatasetContext ctx;
  ctx.base_dir = scratch_dir();
  ctx.max_image_bytes = max_image_bytes;
  return trainer::make_dataset(trainer::cfg::root(doc), ctx);
}

// Reads the first samples of `ds` (every byte of each), as the loader would.
inline void drain(const trainer::Dataset& ds, int64_t max_samples = 16) {
  const int64_t n = std::min<int64_t>(ds.size(), max_samples);
  if (ds.float_samples()) {
    std::vector<float> v(size_t(ds.sample_shape().numel()));
    for (int64_t i = 0; i < n; ++i) ds.get_f32(i, v.data());
  } else {
    std::vector<uint8_t> v(size_t(ds.sample_shape().numel()));
    for (int64_t i = 0; i < n; ++i) ds.get(i, v.data());
  }
}

// Runs f; the documented refusals (exit 2 or 3 in the CLI) are the expected outcome of most
// inputs and are swallowed. Anything else escapes to libFuzzer, which reports it as a crash.
template <class F>
void refusals_expected(F&& f) {
  try {
    f();
  } catch (const trainer::DataError&) {
  } catch (const trainer::FileError&) {
  } catch (const trainer::cfg::ConfigError&) {
  }
}

}  // namespace fuzz
