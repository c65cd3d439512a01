// Allocators: the interface and the host allocator that reuses freed blocks by size.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "core/tensor/device.h"

namespace trainer {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Every tensor's memory comes from here; each call is counted (allocator_calls()).
  void* allocate(size_t bytes) {
    count_allocation();
    return do_allocate(bytes);
  }
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual Device device() const = 0;

 protected:
  virtual void* do_allocate(size_t bytes) = 0;

 private:
  static void count_allocation();
};

// allocate() calls on every allocator of the process so far (host and device): `trainer bench`
// reports them per timed step (allocations_per_step), which a planned step keeps at 0.
uint64_t allocator_calls();

// 64-byte aligned host memory; freed blocks are kept on per-size free lists and handed out again,
// so a training step that allocates the same shapes every time touches malloc only in step one.
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(Device d = Device::cpu()) : device_(d) {}
  ~HostAllocator() override;
  void deallocate(void* p, size_t bytes) override;
  Device device() const override { return device_; }
  size_t cached_bytes() const;
  void release_cache();
  // allocate() calls so far, and how many of them had to go to the system (no cached block).
  size_t allocations() const;
  size_t system_allocations() const;

 private:
  void* do_allocate(size_t bytes) override;
  static size_t round(size_t bytes);
  Device device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t allocations_ = 0, system_allocations_ = 0;
};

// The process-wide host allocator (used for CPU tensors unless a context supplies its own).
HostAllocator& host_allocator();

}  // namespace trainer
