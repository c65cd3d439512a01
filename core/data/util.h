// Helpers shared by the dataset readers: path resolution, whole-file reads, a parallel loop.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/io/file.h"

namespace trainer::data_util {

// `path` if absolute or base_dir is empty, else base_dir/path (lexically normalised).
std::string resolve_path(const std::string& base_dir, const std::string& path);

// fn(), with an InputFileError (core/io/file.h: a path that cannot be opened, is not a regular
// file or is too large) rethrown as a DataError of the same message (exit code 3 either way).
template <class Fn>
auto as_data_error(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const InputFileError& e) {
    throw DataError(e.what());
  }
}

// The whole file through InputFile: DataError "<path>: cannot open: <reason>" when it cannot be
// opened, "<path>: is a FIFO, not a regular file" (a device, a socket, a directory), and
// "<path>: N bytes, larger than 1.0 GiB (<limit_name>), not read" past `max_bytes` (decided from
// its size before reading).
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                               const std::string& limit_name = "");

// A whole file mapped read-only (read into memory where mapping fails: empty files, file systems
// without mmap), through InputFile's checks (DataError as read_file's). `owner` keeps it alive.
struct MappedFile {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
};
MappedFile map_file(const std::string& path);

// The regular files (symbolic links followed) of folder `dir` whose names `keep` accepts, as
// paths, sorted by name. DataError "<dir>: cannot list: <reason>".
std::vector<std::string> files_in(const std::string& dir, const std::function<bool(const std::string& name)>& keep);

// Threads to use for a parallel load/scan: hardware threads, at least 2, at most `cap`.
int default_threads(int cap = 8);

// Runs fn(i) for i in [0, n) on `threads` std::threads (dynamic chunks of `grain`); the first
// exception (by lowest index among those thrown) is rethrown after all threads have joined.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn, int64_t grain = 64);

// Memory for decoded in-memory caches (image_folder `cache: auto`), one budget per process shared
// by every dataset: half of physical memory, or $TRAINER_CACHE_MB MiB when set. A reservation
// returns its bytes when the last copy of it is destroyed (with the dataset holding it).
// `force` (cache: true) always succeeds, even past the budget; otherwise null when it does not fit.
std::shared_ptr<const void> reserve_cache(uint64_t bytes, bool force);
uint64_t cache_budget();       // total bytes
uint64_t cache_budget_left();  // not reserved yet (0 when over-committed by forced reservations)
void set_cache_budget(uint64_t bytes);  // tests; 0 restores the default

using ::trainer::format_bytes;  // core/io/file.h

}  // namespace trainer::data_util
