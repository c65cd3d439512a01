// Host allocator with size-keyed reuse of freed blocks.
#include "core/tensor/allocator.h"

#include <cstdlib>
#include <new>

namespace trainer {

size_t HostAllocator::round(size_t bytes) {
  // 64-byte granularity below 4 KiB, then 4 KiB pages: similar requests share a free list.
  if (bytes <= 4096) return (bytes + 63) & ~size_t(63);
  return (bytes + 4095) & ~size_t(4095);
}

void* HostAllocator::allocate(size_t bytes) {
  if (bytes == 0) bytes = 64;
  size_t r = round(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(r);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= r;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, r);
  if (!p) throw std::bad_alloc();
  return p;
}

void HostAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  if (bytes == 0) bytes = 64;
  size_t r = round(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[r].push_back(p);
  cached_ += r;
}

size_t HostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

void HostAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, list] : free_)
    for (void* p : list) std::free(p);
  free_.clear();
  cached_ = 0;
}

HostAllocator::~HostAllocator() { release_cache(); }

HostAllocator& host_allocator() {
  static HostAllocator* a = new HostAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

}  // namespace trainer
