// Host allocator with size-keyed reuse of freed blocks.
#include "core/tensor/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

// Under AddressSanitizer the cache would hide bugs: a block's rounding slack and a cached (freed)
// block are addressable as far as ASan knows. Both are poisoned, so an overrun past the requested
// size and a use after deallocate() are reported like a heap overflow / use-after-free.
#if defined(__SANITIZE_ADDRESS__)
#define TRAINER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINER_ASAN 1
#endif
#endif
#ifdef TRAINER_ASAN
#include <sanitizer/asan_interface.h>
#define TRAINER_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define TRAINER_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define TRAINER_POISON(p, n) ((void)(p), (void)(n))
#define TRAINER_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace trainer {

size_t HostAllocator::round(size_t bytes) {
  // 64-byte granularity below 4 KiB, then 4 KiB pages: similar requests share a free list.
  if (bytes <= 4096) return (bytes + 63) & ~size_t(63);
  return (bytes + 4095) & ~size_t(4095);
}

namespace {
std::atomic<uint64_t> g_allocator_calls{0};
}  // namespace

void Allocator::count_allocation() { g_allocator_calls.fetch_add(1, std::memory_order_relaxed); }
uint64_t allocator_calls() { return g_allocator_calls.load(std::memory_order_relaxed); }

void* HostAllocator::do_allocate(size_t bytes) {
  if (bytes == 0) bytes = 64;
  size_t r = round(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++allocations_;
    auto it = free_.find(r);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= r;
    }
  }
  if (!p) {
    p = std::aligned_alloc(64, r);
    if (!p) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(mu_);
    ++system_allocations_;
  }
  TRAINER_UNPOISON(p, bytes);
  TRAINER_POISON(static_cast<char*>(p) + bytes, r - bytes);
  return p;
}

void HostAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  if (bytes == 0) bytes = 64;
  size_t r = round(bytes);
  TRAINER_POISON(p, r);
  std::lock_guard<std::mutex> lock(mu_);
  free_[r].push_back(p);
  cached_ += r;
}

size_t HostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

size_t HostAllocator::allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_;
}

size_t HostAllocator::system_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return system_allocations_;
}

void HostAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, list] : free_)
    for (void* p : list) {
      TRAINER_UNPOISON(p, size);
      std::free(p);
    }
  free_.clear();
  cached_ = 0;
}

HostAllocator::~HostAllocator() { release_cache(); }

HostAllocator& host_allocator() {
  static HostAllocator* a = new HostAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

}  // namespace trainer
