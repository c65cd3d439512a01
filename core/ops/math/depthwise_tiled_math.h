// Depthwise conv2d arithmetic of the dw_tiled GPU kernels: K×K windows at stride S fixed at compile time, a vector of channels a thread, the filter gradient by blocks of rows summed in a fixed order.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/ops/math/depthwise_math.h"
#include "core/ops/math/hd.h"

// The general kernels (depthwise_math.h) decode four coordinates per output channel and loop over
// windows and strides known only at run time, one 4-byte load after the other; the filter gradient
// gives each (chunk, tap, channel) one thread that walks up to ~800 rows alone. The tiled kernels
// (fast path dw_tiled, cuda_depthwise_tiled.cu) take the shapes of MobileNet-style networks —
// multiplier 1, a square 3×3 or 5×5 window, stride 1 or 2 in both directions, no dilation:
//  - forward and backward data: one thread per position and V consecutive channels (a 16-byte
//    vector of the storage type; C a multiple of V), the window's taps unrolled. Each channel's
//    sum has the general kernels' terms in their order (fmaf, taps ky then kx, then the bias), so
//    the results are the same bits as theirs (kernel_math_dw_tiled_test.cpp checks it on the host).
//  - filter gradient (and bias): the n·oh·ow rows are cut into chunks (filter_chunks: a function
//    of the shape alone); a block of kRowLanes × kChanLanes threads takes one chunk and 32
//    channels; the thread of row lane r sums rows row0 + r, row0 + r + kRowLanes, ... in order,
//    one accumulator per tap and one for the bias (filter_lane_sums: dy is read once per row, not
//    once per tap); the block's partial of each (slot, channel) is its lanes' sums added in lane
//    order (lanes_sum). Then one warp per (slot, channel): lane l adds the chunks l, l + 32, ...
//    in order (lane_chunk_sum), and a butterfly over the 32 lanes (offsets 16, 8, 4, 2, 1, each
//    lane adding its partner's value to its own) gives every lane the sum; lane 0's is stored.
//    Another order than the general kernels', so other bits, within the bound of its depth
//    (filter_sum_depth); the same bits on every GPU and run.
// The index arithmetic is 32-bit (the tiled kernels take calls whose counts are below 2^30).

#if defined(__CUDA_ARCH__)  // the device pass (the host compiler does not know the pragma)
#define TRAINER_DW_UNROLL _Pragma("unroll")
#else
#define TRAINER_DW_UNROLL
#endif

namespace trainer::depthwise_tiled {

using depthwise_math::DwShape;

constexpr int kChanLanes = 32;  // channels of a filter-gradient block (a warp's width)
constexpr int kRowLanes = 8;    // row lanes of a filter-gradient block: 256 threads
constexpr int kWarp = 32;       // lanes of the chunk sum

// Whether the tiled kernels take this window: multiplier 1, K×K with K 3 or 5, stride S×S with S
// 1 or 2, no dilation (any padding: the bounds checks are the padding).
TRAINER_HD_INLINE bool takes_window(const DwShape& s) {
  return s.m == 1 && s.kh == s.kw && (s.kh == 3 || s.kh == 5) && s.sh == s.sw && (s.sh == 1 || s.sh == 2) &&
         s.dh == 1 && s.dw == 1 && s.c > 0;
}

// f(K, S) with the window and stride as integral constants, for a shape takes_window accepts: the
// one dispatch from a run-time shape to the kernels' templates (the launches, the host model).
template <class F>
decltype(auto) with_window(const DwShape& s, F&& f) {
  using K3 = std::integral_constant<int, 3>;
  using K5 = std::integral_constant<int, 5>;
  using S1 = std::integral_constant<int, 1>;
  using S2 = std::integral_constant<int, 2>;
  if (s.kh == 3) return s.sh == 1 ? f(K3{}, S1{}) : f(K3{}, S2{});
  return s.sh == 1 ? f(K5{}, S1{}) : f(K5{}, S2{});
}

// Vector i of an NHWC tensor [n, h, w, C] seen as [n, h, w, C/V] vectors of V channels (channels
// innermost): its first channel c0 and its position (n, y, x).
template <int V, class I>
TRAINER_HD_INLINE void vector_at(I i, int64_t c, int64_t h, int64_t w, I& n, I& y, I& x, I& c0) {
  const I groups = I(c / V);
  c0 = (i % groups) * I(V);
  I r = i / groups;
  x = r % I(w);
  r /= I(w);
  y = r % I(h);
  n = r / I(h);
}

// Output vector i of y ([n, oh, ow, C/V] vectors of V channels, channels innermost): each channel
// as depthwise_math::forward_at sums it (same terms, same order). x.vec(element, out) loads V
// consecutive channels widened to float.
template <int K, int S, int V, class LoadV, class I>
TRAINER_HD_INLINE void forward_vec_at(const DwShape& s, const LoadV& x, const float* w, const float* b, I i,
                                      float (&acc)[V]) {
  const I sc = I(s.c), sih = I(s.ih), siw = I(s.iw);
  I n, oy, ox, c0;
  vector_at<V>(i, s.c, s.oh, s.ow, n, oy, ox, c0);
  TRAINER_DW_UNROLL
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  TRAINER_DW_UNROLL
  for (int ky = 0; ky < K; ++ky) {
    const I iy = oy * I(S) - I(s.pt) + I(ky);
    if (iy < 0 || iy >= sih) continue;
    const I xrow = (n * sih + iy) * siw;
    TRAINER_DW_UNROLL
    for (int kx = 0; kx < K; ++kx) {
      const I ix = ox * I(S) - I(s.pl) + I(kx);
      if (ix < 0 || ix >= siw) continue;
      float xv[V];
      x.vec((xrow + ix) * sc + c0, xv);
      const float* wt = w + I(ky * K + kx) * sc + c0;
      TRAINER_DW_UNROLL
      for (int j = 0; j < V; ++j) acc[j] = fmaf(xv[j], wt[j], acc[j]);
    }
  }
  if (b) {
    TRAINER_DW_UNROLL
    for (int j = 0; j < V; ++j) acc[j] = acc[j] + b[c0 + j];
  }
}

// Input-gradient vector i of dx ([n, ih, iw, C/V]): each channel as
// depthwise_math::backward_data_at sums it (the taps covering the position, ky then kx).
template <int K, int S, int V, class LoadV, class I>
TRAINER_HD_INLINE void backward_data_vec_at(const DwShape& s, const LoadV& dy, const float* w, I i, float (&acc)[V]) {
  const I sc = I(s.c), soh = I(s.oh), sow = I(s.ow);
  I n, iy, ix, c0;
  vector_at<V>(i, s.c, s.ih, s.iw, n, iy, ix, c0);
  TRAINER_DW_UNROLL
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  TRAINER_DW_UNROLL
  for (int ky = 0; ky < K; ++ky) {
    const I ty = iy + I(s.pt) - I(ky);
    if (ty < 0) continue;
    const I oy = ty / I(S);  // S is a constant: a shift, no division
    if (oy * I(S) != ty || oy >= soh) continue;
    TRAINER_DW_UNROLL
    for (int kx = 0; kx < K; ++kx) {
      const I tx = ix + I(s.pl) - I(kx);
      if (tx < 0) continue;
      const I ox = tx / I(S);
      if (ox * I(S) != tx || ox >= sow) continue;
      float g[V];
      dy.vec(((n * soh + oy) * sow + ox) * sc + c0, g);
      const float* wt = w + I(ky * K + kx) * sc + c0;
      TRAINER_DW_UNROLL
      for (int j = 0; j < V; ++j) acc[j] = fmaf(g[j], wt[j], acc[j]);
    }
  }
}

// Chunks of the rows for the filter gradient: about 128 rows each (16 per row lane), at most 2048
// chunks, none empty. A function of the shape alone.
TRAINER_HD_INLINE void filter_chunks(int64_t rows, int64_t& chunks, int64_t& rows_per_chunk) {
  depthwise_math::filter_chunks(rows, chunks, rows_per_chunk, 128, 2048);
}

// Row lane `lane`'s sums over rows [row0, row1) of channel c: acc[ky·K + kx] the sum of
// dy[row, c]·x[the input under tap (ky, kx)] (fmaf, rows in order), acc[K·K] the sum of dy[row, c].
template <int K, int S, class LoadX, class LoadDy, class I>
TRAINER_HD_INLINE void filter_lane_sums(const DwShape& s, const LoadX& x, const LoadDy& dy, I row0, I row1, int lane,
                                        I c, float (&acc)[K * K + 1]) {
  TRAINER_DW_UNROLL
  for (int t = 0; t <= K * K; ++t) acc[t] = 0.0f;
  I row = row0 + I(lane);
  if (row >= row1) return;
  const I sow = I(s.ow), soh = I(s.oh), sih = I(s.ih), siw = I(s.iw), sc = I(s.c);
  I ox = row % sow, t = row / sow;
  I oy = t % soh, n = t / soh;
  for (; row < row1; row += I(kRowLanes)) {
    const float g = dy(row * sc + c);
    acc[K * K] += g;
    TRAINER_DW_UNROLL
    for (int ky = 0; ky < K; ++ky) {
      const I iy = oy * I(S) - I(s.pt) + I(ky);
      if (iy < 0 || iy >= sih) continue;
      TRAINER_DW_UNROLL
      for (int kx = 0; kx < K; ++kx) {
        const I ix = ox * I(S) - I(s.pl) + I(kx);
        if (ix < 0 || ix >= siw) continue;
        acc[ky * K + kx] = fmaf(g, x(((n * sih + iy) * siw + ix) * sc + c), acc[ky * K + kx]);
      }
    }
    ox += I(kRowLanes);  // the next row of this lane
    while (ox >= sow) {
      ox -= sow;
      if (++oy == soh) {
        oy = 0;
        ++n;
      }
    }
  }
}

// A block's partial of one (slot, channel): the row lanes' sums v[0], v[stride], ... in lane order.
TRAINER_HD_INLINE float lanes_sum(const float* v, int stride) {
  float sum = 0.0f;
  for (int r = 0; r < kRowLanes; ++r) sum += v[r * stride];
  return sum;
}

// Lane `lane`'s share of output o's chunk sum: partials [chunk][per_chunk] of chunks lane,
// lane + 32, ... added in order.
TRAINER_HD_INLINE float lane_chunk_sum(const float* partial, int64_t chunks, int64_t per_chunk, int64_t o, int lane) {
  float sum = 0.0f;
  for (int64_t k = lane; k < chunks; k += kWarp) sum += partial[k * per_chunk + o];
  return sum;
}

// The butterfly over the 32 lanes' shares as the device's __shfl_xor_sync does it (host model):
// at each offset every lane adds its partner's value to its own; lane 0's result.
inline float butterfly_sum(const float (&lanes)[kWarp]) {
  float v[kWarp], next[kWarp];
  for (int l = 0; l < kWarp; ++l) v[l] = lanes[l];
  for (int off = kWarp / 2; off > 0; off /= 2) {
    for (int l = 0; l < kWarp; ++l) next[l] = v[l] + v[l ^ off];
    for (int l = 0; l < kWarp; ++l) v[l] = next[l];
  }
  return v[0];
}

// The longest chain of roundings of one filter-gradient value: a lane's rows, the lanes' sum, a
// warp lane's chunks, the butterfly. A sum of T terms rounded in a chain of d steps errs by at
// most d·u·Σ|terms| (each partial sum is at most Σ|terms|).
TRAINER_HD_INLINE int64_t filter_sum_depth(int64_t rows_per_chunk, int64_t chunks) {
  return (rows_per_chunk + kRowLanes - 1) / kRowLanes + kRowLanes + (chunks + kWarp - 1) / kWarp + 5;
}

}  // namespace trainer::depthwise_tiled
