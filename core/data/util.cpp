// Helpers shared by the dataset readers: path resolution, whole-file reads, a parallel loop.
#include "core/data/util.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "core/data/dataset.h"

namespace trainer::data_util {

std::string resolve_path(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return p.lexically_normal().string();
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes, const std::string& limit_name) {
  return as_data_error([&] {
    InputFile f(path);
    const std::string bytes = f.read_all(max_bytes, limit_name);
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  });
}

MappedFile map_file(const std::string& path) {
  InputFile in = as_data_error([&] { return InputFile(path); });
  MappedFile m;
  m.size = size_t(in.size());
  void* map = m.size ? ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, in.fd(), 0) : MAP_FAILED;
  if (map != MAP_FAILED) {
    const size_t size = m.size;
    m.owner = std::shared_ptr<const void>(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  } else {  // empty, or a file system without mmap: read it whole (its size at open, no more)
    auto bytes = std::make_shared<std::string>(as_data_error([&] { return in.read_all(); }));
    m.size = bytes->size();
    m.owner = std::shared_ptr<const void>(bytes, bytes->data());
  }
  m.data = static_cast<const uint8_t*>(m.owner.get());
  return m;
}

std::vector<std::string> files_in(const std::string& dir, const std::function<bool(const std::string& name)>& keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : fs::path(dir), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (keep(it->path().filename().string()) && fs::is_regular_file(it->path(), fe)) files.push_back(it->path().string());
  }
  if (ec) throw DataError(fmt::format("{}: cannot list: {}", dir, ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

int default_threads(int cap) {
  int hw = int(std::thread::hardware_concurrency());
  return std::clamp(hw, 2, std::max(cap, 2));
}

void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = (n + grain - 1) / grain;
  threads = int(std::clamp<int64_t>(threads, 1, chunks));
  std::atomic<int64_t> next_chunk{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  int64_t error_index = INT64_MAX;
  std::exception_ptr error;
  // Chunks are claimed in increasing order and none is claimed after a failure, so every index
  // below the failing one has been run: the error reported is the lowest-index one, always.
  auto work = [&] {
    while (!failed.load(std::memory_order_relaxed)) {
      int64_t c = next_chunk.fetch_add(1);
      if (c >= chunks) return;
      for (int64_t i = c * grain, end = std::min(n, i + grain); i < end; ++i) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (i < error_index) error_index = i, error = std::current_exception();
          failed = true;
          break;
        }
      }
    }
  };
  if (threads == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

namespace {

struct CacheBudget {
  std::mutex mu;
  uint64_t total = 0;  // 0: not decided yet
  uint64_t reserved = 0;
};

CacheBudget& budget() {
  static CacheBudget b;
  return b;
}

uint64_t default_budget() {
  if (const char* env = std::getenv("TRAINER_CACHE_MB"); env && *env) {
    char* end = nullptr;
    unsigned long long mb = std::strtoull(env, &end, 10);
    if (end && *end == '\0') return uint64_t(mb) << 20;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return uint64_t(4) << 30;  // unknown: 4 GiB
  return uint64_t(pages) * uint64_t(page) / 2;
}

uint64_t total_locked(CacheBudget& b) {
  if (b.total == 0) b.total = default_budget();
  return b.total;
}

}  // namespace

std::shared_ptr<const void> reserve_cache(uint64_t bytes, bool force) {
  CacheBudget& b = budget();
  std::lock_guard<std::mutex> lock(b.mu);
  const uint64_t total = total_locked(b);
  if (!force && (b.reserved > total || bytes > total - b.reserved)) return nullptr;
  b.reserved += bytes;
  // A deleter-only shared_ptr: the pointer itself is never used.
  return std::shared_ptr<const void>(static_cast<const void*>(&b), [bytes](const void*) {
    CacheBudget& c = budget();
    std::lock_guard<std::mutex> l(c.mu);
    c.reserved -= std::min(bytes, c.reserved);
  });
}

uint64_t cache_budget() {
  CacheBudget& b = budget();
  std::lock_guard<std::mutex> lock(b.mu);
  return total_locked(b);
}

uint64_t cache_budget_left() {
  CacheBudget& b = budget();
  std::lock_guard<std::mutex> lock(b.mu);
  const uint64_t total = total_locked(b);
  return b.reserved >= total ? 0 : total - b.reserved;
}

void set_cache_budget(uint64_t bytes) {
  CacheBudget& b = budget();
  std::lock_guard<std::mutex> lock(b.mu);
  b.total = bytes;
}

}  // namespace trainer::data_util
