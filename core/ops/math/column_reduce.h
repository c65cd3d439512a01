// The combination order of the GPU's deterministic per-column reductions of [rows, C] (partition, each thread's rows, lane trees, finish), and its bit-exact host emulation.
#pragma once
#include <cstdint>
#include <vector>

#include "core/ops/math/hd.h"

// cuda_reduce.cuh runs two kernels; this header is the order they add in, written once for the
// kernels and for column_reduce_reference, the host emulation the tests compare them with bit
// for bit. Every quantity is summed in double; K quantities per element (bias gradient K = 1,
// batch-norm statistics K = 2).
//  1. Partials. column_split(m, C) cuts the rows into `parts` contiguous parts of rows_per_part
//     (the last may be shorter, none is empty) and the columns into 32-column tiles; one block of
//     32 x 8 threads per (tile, part). Thread (lane, row_lane) takes column tile·32 + lane and the
//     part's rows begin + row_lane, + 8, + 16, ... in increasing order (a warp reads 32
//     consecutive elements of one row), adding each element's terms into its K accumulators
//     (from 0). The 8 row lanes are then combined by lane_tree: at step h = 4, 2, 1 lane j < h adds
//     lane j + h. The block writes its part's K partials of each column.
//  2. Finish. One block of 32 x 32 threads per 32-column tile. Thread (lane, part_lane) adds the
//     partials of parts part_lane, part_lane + 32, ... of its column in increasing order (at most
//     kMaxParts / 32 = 32 each), then lane_tree over the 32 part lanes (h = 16, 8, 4, 2, 1); the
//     epilogue gets the K totals. (Until 2026-11 the finish was one thread per column adding up to
//     1024 partials serially, with only C threads busy: a few ms per MiniGoogLeNet step.)
// Nothing depends on the grid, the GPU or the run, only on (m, C): the sums are the same bits
// everywhere, and a column's sum does not depend on the other columns' values or on where in
// [0, C) the column is. With m = 0 there are no parts and the epilogue sees zeros.

namespace trainer::colred {

constexpr int kTile = 32;                        // columns per block (both kernels)
constexpr int kRowLanes = 8;                     // row lanes per partials block
constexpr int kPartialThreads = kTile * kRowLanes;  // 256
constexpr int kPartLanes = 32;                   // part lanes per finish block
constexpr int kFinishThreads = kTile * kPartLanes;  // 1024
constexpr int64_t kRowsPerPart = 256;            // target rows per part (32 per thread)
constexpr int64_t kMaxParts = 1024;
constexpr int64_t kMaxBlocks = 65536;            // partials blocks: tiles x parts, at most about this

struct ColumnSplit {
  int64_t tiles = 0, parts = 0, rows_per_part = 0;
};

// The partition of m rows x C columns (a function of m and C only).
TRAINER_HD_INLINE ColumnSplit column_split(int64_t m, int64_t C) {
  ColumnSplit s;
  s.tiles = C > 0 ? (C + kTile - 1) / kTile : 0;
  if (m <= 0 || C <= 0) return s;
  int64_t parts = (m + kRowsPerPart - 1) / kRowsPerPart;
  const int64_t by_blocks = kMaxBlocks / s.tiles > 1 ? kMaxBlocks / s.tiles : 1;
  if (parts > kMaxParts) parts = kMaxParts;
  if (parts > by_blocks) parts = by_blocks;
  s.rows_per_part = (m + parts - 1) / parts;
  s.parts = (m + s.rows_per_part - 1) / s.rows_per_part;  // no empty part
  return s;
}

struct RowRange {
  int64_t begin = 0, end = 0;  // [begin, end)
};

// Part p's rows.
TRAINER_HD_INLINE RowRange part_rows(const ColumnSplit& s, int64_t p, int64_t m) {
  const int64_t b = p * s.rows_per_part, e = b + s.rows_per_part;
  return {b, e < m ? e : m};
}

// Thread (lane, row_lane) of a partials block: its column, or -1 past C.
TRAINER_HD_INLINE int64_t tile_column(int64_t tile, int lane, int64_t C) {
  const int64_t c = tile * kTile + lane;
  return c < C ? c : -1;
}

// Calls f(r) for each row of `rows` that row lane `row_lane` adds, in the order it adds them.
template <class F>
TRAINER_HD_INLINE void for_lane_rows(RowRange rows, int row_lane, F&& f) {
  for (int64_t r = rows.begin + row_lane; r < rows.end; r += kRowLanes) f(r);
}

// Calls f(p) for each part whose partial part lane `part_lane` adds, in the order it adds them.
template <class F>
TRAINER_HD_INLINE void for_lane_parts(int64_t parts, int part_lane, F&& f) {
  for (int64_t p = part_lane; p < parts; p += kPartLanes) f(p);
}

// The lane tree over `lanes` (a power of two) accumulators of K doubles, sequentially: at step
// h = lanes/2, lanes/4, ..., 1, lane j < h adds lane j + h. The kernels run the same steps in
// parallel (one thread per lane, a barrier between steps); the result is lane 0.
template <int K>
TRAINER_HD_INLINE void lane_tree(double (*v)[K], int lanes) {
  for (int h = lanes / 2; h > 0; h /= 2)
    for (int j = 0; j < h; ++j)
      for (int k = 0; k < K; ++k) v[j][k] += v[j + h][k];
}

// Plain column sums (bias gradients): the element itself.
TRAINER_HD_INLINE void sum_term(float x, double (&a)[1]) { a[0] += double(x); }

// Host emulation: out[c * K + k] = what the two kernels hand the epilogue for column c, bit for
// bit, where f(r, c, acc) adds element (r, c)'s K terms into acc (the same functor math as the
// kernel's). Column by column: O(m·C·K) additions and O(parts·K) memory.
template <int K, class F>
void column_reduce_reference(int64_t m, int64_t C, const F& f, double* out) {
  const ColumnSplit s = column_split(m, C);
  std::vector<double> part(size_t(s.parts) * K);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t p = 0; p < s.parts; ++p) {
      double lanes[kRowLanes][K] = {};
      const RowRange rows = part_rows(s, p, m);
      for (int l = 0; l < kRowLanes; ++l) for_lane_rows(rows, l, [&](int64_t r) { f(r, c, lanes[l]); });
      lane_tree<K>(lanes, kRowLanes);
      for (int k = 0; k < K; ++k) part[size_t(p) * K + k] = lanes[0][k];
    }
    double fin[kPartLanes][K] = {};
    for (int l = 0; l < kPartLanes; ++l)
      for_lane_parts(s.parts, l, [&](int64_t p) {
        for (int k = 0; k < K; ++k) fin[l][k] += part[size_t(p) * K + k];
      });
    lane_tree<K>(fin, kPartLanes);
    for (int k = 0; k < K; ++k) out[c * K + k] = fin[0][k];
  }
}

}  // namespace trainer::colred
