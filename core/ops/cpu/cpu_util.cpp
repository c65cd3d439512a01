// Per-thread grow-only scratch buffers for the CPU kernels, the f32 GEMMs dense and 1x1 convolutions share, and the deterministic column sums of the bias gradients.
#include "core/ops/cpu/cpu_util.h"

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/ops/cpu/cpu_bf16.h"

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

void column_sums(const char* op, const Tensor& x, int64_t rows, int64_t cols, float* out) {
  if (cols <= 0) return;
  if (rows <= 0) {
    std::fill(out, out + cols, 0.0f);
    return;
  }
  const int64_t per = std::max<int64_t>(64, (rows + 255) / 256), blocks = (rows + per - 1) / per;
  double* part = static_cast<double*>(thread_scratch(kScratchReduce, size_t(blocks * cols) * sizeof(double)));
  dispatch_float(op, "dy", x, [&](auto t) {
    const auto* g = static_cast<const decltype(t)*>(x.data());
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
    for (int64_t b = 0; b < blocks; ++b) {
      double* acc = part + b * cols;
      std::fill(acc, acc + cols, 0.0);
      for (int64_t i = b * per; i < std::min(rows, (b + 1) * per); ++i)
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) acc[j] += double(to_f32(g[i * cols + j]));
    }
  });
#pragma omp parallel for schedule(static) if (blocks * cols > kParallelGrain)
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += part[b * cols + j];
    out[j] = float(s);
  }
}

}  // namespace trainer::cpu
