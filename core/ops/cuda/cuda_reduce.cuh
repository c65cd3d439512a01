// Deterministic per-column reductions of [rows, C] tensors (bias gradients, batch-norm statistics): fixed-order partials in double, then a finish pass.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/ops/cuda/cuda_dtype.cuh"

// Two launches, no atomics, and a partition that depends on (rows, C) alone, so a result is the
// same bits on every run and every GPU:
//  1. column_partials_kernel: block b covers the 32 columns of tile b % tiles and the rows of part
//     b / tiles. Thread t takes column tile * 32 + t % 32 and rows part_begin + t / 32, + 8, + 16, ...
//     (a warp reads 32 consecutive elements of one row); it adds K quantities per element in double
//     through the functor (f(row, col, acc)), then the 8 row lanes are added by a fixed shared-memory
//     tree, and the block writes its part's partials to part[(p * K + k) * C + c].
//  2. column_finish_kernel: per column, the parts' partials added in part order, handed to the
//     epilogue functor (g(col, sums)) which writes the results.
// With no rows, parts is 0 and the epilogue sees zeros.

namespace trainer::cuda {

constexpr int kColTile = 32;                        // columns per block
constexpr int kColLanes = 8;                        // row lanes per block
constexpr int kColThreads = kColTile * kColLanes;  // 256
constexpr int64_t kColRowsPerPart = 256;            // target rows per part (32 per thread)
constexpr int64_t kColMaxParts = 1024;
constexpr int64_t kColMaxBlocks = 65536;

struct ColumnSplit {
  int64_t tiles = 0, parts = 0, rows_per_part = 0;
};

// The partition of m rows x C columns (a function of m and C only).
inline ColumnSplit column_split(int64_t m, int64_t C) {
  ColumnSplit s;
  s.tiles = (C + kColTile - 1) / kColTile;
  if (m <= 0 || C <= 0) return s;
  int64_t parts = (m + kColRowsPerPart - 1) / kColRowsPerPart;
  parts = std::min({parts, kColMaxParts, std::max<int64_t>(1, kColMaxBlocks / s.tiles)});
  s.rows_per_part = (m + parts - 1) / parts;
  s.parts = (m + s.rows_per_part - 1) / s.rows_per_part;  // no empty part
  return s;
}

template <int K, class F>
__global__ void __launch_bounds__(kColThreads)
    column_partials_kernel(F f, int64_t m, int64_t C, int64_t tiles, int64_t rows_per_part, double* __restrict__ part) {
  __shared__ double sh[K][kColThreads];
  const int t = int(threadIdx.x), lane = t % kColTile, row_lane = t / kColTile;
  const int64_t tile = int64_t(blockIdx.x) % tiles, p = int64_t(blockIdx.x) / tiles;
  const int64_t c = tile * kColTile + lane;
  const int64_t r0 = p * rows_per_part, r1 = r0 + rows_per_part < m ? r0 + rows_per_part : m;
  double acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (c < C)
    for (int64_t r = r0 + row_lane; r < r1; r += kColLanes) f(r, c, acc);
#pragma unroll
  for (int k = 0; k < K; ++k) sh[k][t] = acc[k];
  __syncthreads();
#pragma unroll
  for (int h = kColLanes / 2; h > 0; h /= 2) {  // row lane j += row lane j + h, for j < h
    if (row_lane < h)
#pragma unroll
      for (int k = 0; k < K; ++k) sh[k][t] += sh[k][t + h * kColTile];
    __syncthreads();
  }
  if (row_lane == 0 && c < C)
#pragma unroll
    for (int k = 0; k < K; ++k) part[(p * K + k) * C + c] = sh[k][t];
}

template <int K, class G>
__global__ void column_finish_kernel(const double* __restrict__ part, int64_t parts, int64_t C, G g) {
  CUDA_GRID_LOOP(c, C) {
    double s[K];
#pragma unroll
    for (int k = 0; k < K; ++k) s[k] = 0.0;
    for (int64_t p = 0; p < parts; ++p)
#pragma unroll
      for (int k = 0; k < K; ++k) s[k] += part[(p * K + k) * C + c];
    g(c, s);
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
    if (s.tiles * s.parts > int64_t(INT_MAX)) fail("column reduction: ", C, " columns are too many");
    double* part = nullptr;
    if (s.parts > 0) {
      const int64_t need = s.parts * K * C;
      if (part_.bytes() < size_t(need) * sizeof(double)) part_ = c.empty({need * int64_t(sizeof(double))}, DType::U8);
      part = static_cast<double*>(part_.data());
      TRAINER_LAUNCH((column_partials_kernel<K, F>), unsigned(s.tiles * s.parts), unsigned(kColThreads), c.stream(), f,
                     m, C, s.tiles, s.rows_per_part, part);
    }
    TRAINER_LAUNCH((column_finish_kernel<K, G>), grid_for(C, c), kBlock, c.stream(), part, s.parts, C, g);
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
    a[0] += double(to_f32(x[r * ld + c]));
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
