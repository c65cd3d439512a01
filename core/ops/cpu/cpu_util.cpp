// Per-thread grow-only scratch buffers for the CPU kernels.
#include "core/ops/cpu/cpu_util.h"

#include <cstdlib>
#include <new>

namespace trainer::cpu {

namespace {
struct ScratchSet {
  void* ptr[kScratchSlots] = {};
  size_t size[kScratchSlots] = {};
  ~ScratchSet() {
    for (void* p : ptr) std::free(p);
  }
};
}  // namespace

void* thread_scratch(int slot, size_t bytes) {
  thread_local ScratchSet s;
  if (bytes > s.size[slot]) {
    size_t r = (bytes + (1 << 16) - 1) & ~size_t((1 << 16) - 1);  // round up to 64 KiB
    void* p = std::aligned_alloc(64, r);
    if (!p) throw std::bad_alloc();
    std::free(s.ptr[slot]);
    s.ptr[slot] = p;
    s.size[slot] = r;
  }
  return s.ptr[slot];
}

}  // namespace trainer::cpu
