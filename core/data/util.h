// Helpers shared by the dataset readers: path resolution, whole-file reads, a parallel loop.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainer::data_util {

// `path` if absolute or base_dir is empty, else base_dir/path (lexically normalised).
std::string resolve_path(const std::string& base_dir, const std::string& path);

// The whole file; DataError "<path>: cannot open: <reason>" when it cannot be read.
std::vector<uint8_t> read_file(const std::string& path);

// Threads to use for a parallel load/scan: hardware threads, at least 2, at most `cap`.
int default_threads(int cap = 8);

// Runs fn(i) for i in [0, n) on `threads` std::threads (dynamic chunks of `grain`); the first
// exception (by lowest index among those thrown) is rethrown after all threads have joined.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn, int64_t grain = 64);

}  // namespace trainer::data_util
