// Per-thread grow-only scratch buffers for the CPU kernels, and the f32 GEMMs dense and 1x1 convolutions share.
#include "core/ops/cpu/cpu_util.h"

#include <cstdlib>
#include <cstring>
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

void sgemm(const char* who, char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dnnl::sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) != dnnl::status::success)
    fail("{}: sgemm failed for {}x{}x{}", who, m, n, k);
}

void linear_forward_f32(const char* who, int64_t n, int64_t k, int64_t u, const float* x, const float* w,
                        const float* b, float* y) {
  if (b) {  // y = b, then y += x·w
#pragma omp parallel for schedule(static) if (n * u > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * u, b, size_t(u) * sizeof(float));
  }
  sgemm(who, 'N', 'N', n, u, k, x, k, w, u, b ? 1.0f : 0.0f, y, u);
}

}  // namespace trainer::cpu
