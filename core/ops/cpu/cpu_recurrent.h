// Helpers of the CPU recurrent kernels (lstm, gru): row-major sgemm through oneDNN, the batch split into per-thread slices for the time loop, and bias gradients summed in double.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer::cpu::recurrent {

// The batch is split between threads from this many recurrent multiply-adds (N·T·U·G) on.
constexpr int64_t kSliceGrain = int64_t(1) << 20;

// Row-major C = op(A)·op(B) + beta·C; false when oneDNN refuses (not thrown: this runs inside
// parallel regions).
inline bool gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc) {
  return m == 0 || n == 0 || dnnl::sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) == dnnl::status::success;
}

inline void require(bool ok, const char* op, const char* what) {
  if (!ok) cpu::fail("{}: sgemm failed for the {}", op, what);
}

// Runs body(n0, n1) on contiguous slices [n0, n1) of the batch, one per thread (one slice, the
// whole batch, below the grain); returns whether every body returned true. Each thread runs the
// whole time loop on its slice (its small per-step GEMMs single-threaded: oneDNN does not nest),
// with no barrier per step; results are deterministic for a given thread count.
template <class Body>
bool for_batch_slices(int64_t n, int64_t work, Body&& body) {
  if (n < 2 || work < kSliceGrain) return body(int64_t(0), n);
  bool ok = true;
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t n0 = n * id / nt, n1 = n * (id + 1) / nt;
    if (n0 < n1 && !body(n0, n1)) {
#pragma omp atomic write
      ok = false;
    }
  }
  return ok;
}

// db[j] = Σ_rows dz[row, j] (row stride ld), in double, rows in order (columns split between threads).
inline void bias_grad(int64_t rows, int64_t G, const float* dz, int64_t ld, float* db) {
#pragma omp parallel for schedule(static) if (rows * G > cpu::kParallelGrain)
  for (int64_t j0 = 0; j0 < G; j0 += 16) {
    const int64_t j1 = std::min(G, j0 + 16);
    double acc[16] = {};
    for (int64_t q = 0; q < rows; ++q)
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += dz[q * ld + j];
    for (int64_t j = j0; j < j1; ++j) db[j] = float(acc[j - j0]);
  }
}

}  // namespace trainer::cpu::recurrent
