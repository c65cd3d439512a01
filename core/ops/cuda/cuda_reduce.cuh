// Deterministic per-column reductions of [rows, C] tensors (bias gradients, batch-norm statistics): fixed-order partials in double, then a tree finish (column_reduce.h's order).
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/ops/math/column_reduce.h"
#include "core/ops/cuda/cuda_dtype.cuh"

// Two launches, no atomics, and an order of additions that depends on (rows, C) alone, so a result
// is the same bits on every run and every GPU. The order (partition, each thread's rows, the lane
// trees, the finish) is column_reduce.h's, whose host emulation column_reduce_reference the tests
// compare these kernels with bit for bit (kernel_math_column_reduce_test.cpp):
//  1. column_partials_kernel: block b covers the 32 columns of tile b % tiles and the rows of part
//     b / tiles; each thread adds K quantities per element in double through the functor
//     (f(row, col, acc)), then the 8 row lanes are combined by a fixed shared-memory tree, and the
//     block writes its part's partials to part[(p * K + k) * C + c].
//  2. column_finish_kernel: one block of 32 columns x 32 part lanes per tile; each part lane adds
//     every 32nd part's partials of its column, a fixed shared-memory tree combines the 32 lanes,
//     and the epilogue functor (g(col, sums)) writes the results. (It replaced one thread per
//     column adding up to 1024 partials serially: C threads busy, a few ms per MiniGoogLeNet step.)
// With no rows, parts is 0 and the epilogue sees zeros.

namespace trainer::cuda {

using colred::ColumnSplit;
using colred::column_split;
constexpr int kColTile = colred::kTile;
constexpr int kColLanes = colred::kRowLanes;
constexpr int kColThreads = colred::kPartialThreads;  // 256
constexpr int kColPartLanes = colred::kPartLanes;
constexpr int kColFinishThreads = colred::kFinishThreads;  // 1024

// The lane tree of column_reduce.h (colred::lane_tree) run by `lanes` rows of kColTile threads
// over sh[k][lane * kColTile + column lane]: at step h, lanes j < h add lane j + h, a barrier
// between steps. Every thread of the block calls it.
template <int K, int kThreads>
__device__ __forceinline__ void lane_tree_shared(double (&sh)[K][kThreads], int t, int lanes) {
  const int lane = t / kColTile;
  for (int h = lanes / 2; h > 0; h /= 2) {
    if (lane < h)
#pragma unroll
      for (int k = 0; k < K; ++k) sh[k][t] += sh[k][t + h * kColTile];
    __syncthreads();
  }
}

template <int K, class F>
__global__ void __launch_bounds__(kColThreads)
    column_partials_kernel(F f, int64_t m, int64_t C, ColumnSplit s, double* __restrict__ part) {
  __shared__ double sh[K][kColThreads];
  const int t = int(threadIdx.x), row_lane = t / kColTile;
  const int64_t tile = int64_t(blockIdx.x) % s.tiles, p = int64_t(blockIdx.x) / s.tiles;
  const int64_t c = colred::tile_column(tile, t % kColTile, C);
  double acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (c >= 0) colred::for_lane_rows(colred::part_rows(s, p, m), row_lane, [&](int64_t r) { f(r, c, acc); });
#pragma unroll
  for (int k = 0; k < K; ++k) sh[k][t] = acc[k];
  __syncthreads();
  lane_tree_shared<K>(sh, t, kColLanes);
  if (row_lane == 0 && c >= 0)
#pragma unroll
    for (int k = 0; k < K; ++k) part[(p * K + k) * C + c] = sh[k][t];
}

template <int K, class G>
__global__ void __launch_bounds__(kColFinishThreads)
    column_finish_kernel(const double* __restrict__ part, int64_t parts, int64_t C, G g) {
  __shared__ double sh[K][kColFinishThreads];
  const int t = int(threadIdx.x), part_lane = t / kColTile;
  const int64_t c = colred::tile_column(int64_t(blockIdx.x), t % kColTile, C);
  double acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (c >= 0)
    colred::for_lane_parts(parts, part_lane, [&](int64_t p) {
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += part[(p * K + k) * C + c];
    });
#pragma unroll
  for (int k = 0; k < K; ++k) sh[k][t] = acc[k];
  __syncthreads();
  lane_tree_shared<K>(sh, t, kColPartLanes);
  if (part_lane == 0 && c >= 0) {
    double sums[K];
#pragma unroll
    for (int k = 0; k < K; ++k) sums[k] = sh[k][t];
    g(c, sums);
  }
}

// Owns the partials' scratch (grown on demand, so a fixed shape allocates nothing after its first
// call) and runs the two passes on the context's stream.
class ColumnReducer {
 public:
  template <int K, class F, class G>
  void run(CudaContext& c, int64_t m, int64_t C, const F& f, const G& g) {
    if (C <= 0) return;
    const ColumnSplit s = column_split(m, C);
    if (s.tiles > int64_t(INT_MAX) || s.tiles * s.parts > int64_t(INT_MAX))
      fail("column reduction: ", C, " columns are too many");
    double* part = nullptr;
    if (s.parts > 0) {
      const int64_t need = s.parts * K * C;
      if (part_.bytes() < size_t(need) * sizeof(double)) part_ = c.empty({need * int64_t(sizeof(double))}, DType::U8);
      part = static_cast<double*>(part_.data());
      TRAINER_LAUNCH((column_partials_kernel<K, F>), unsigned(s.tiles * s.parts), unsigned(kColThreads), c.stream(), f,
                     m, C, s, part);
    }
    TRAINER_LAUNCH((column_finish_kernel<K, G>), unsigned(s.tiles), unsigned(kColFinishThreads), c.stream(), part,
                   s.parts, C, g);
  }

 private:
  Tensor part_;  // the doubles' bytes
};

// ---------------------------------------------------------------------------------------------
// Bias gradients: db[c] = sum over rows of dy[row, c] (dy [rows, C] of type T, db f32).

template <class T>
struct ColumnSumTerm {
  const T* x;
  int64_t ld;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, double (&a)[1]) const {
    colred::sum_term(to_f32(x[r * ld + c]), a);
  }
};

struct StoreF32 {
  float* out;
  __device__ __forceinline__ void operator()(int64_t c, const double (&s)[1]) const { out[c] = float(s[0]); }
};

template <class T>
void column_sums(ColumnReducer& r, CudaContext& c, const T* x, int64_t rows, int64_t C, float* out) {
  r.run<1>(c, rows, C, ColumnSumTerm<T>{x, C}, StoreF32{out});
}

}  // namespace trainer::cuda
