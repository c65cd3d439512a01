// Depthwise conv2d arithmetic of the GPU kernels: per-output accumulation (forward, backward data), the filter gradient's chunked partials and their fixed-order sum.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/ops/math/hd.h"

// NHWC activations, Keras kernel [kh, kw, C, M] (flat tap·C·M + oc), output channel oc = c·M + m.
// Each output value is summed by one thread in a fixed order (fmaf in float), so results are
// bit-reproducible (cuda_depthwise_conv2d.cu):
//  - forward: y element i: its kh·kw taps, ky then kx;
//  - backward data: dx element i (n, iy, ix, c): the taps whose window covers (iy, ix)
//    (oy = (iy + pt - ky·dh) / sh where that divides exactly), ky then kx, then the M filters;
//  - backward filter (and bias): the n·oh·ow rows of dy cut into filter_chunks (a function of the
//    shape alone); partial (chunk, slot, oc) sums its chunk's rows in order, slot < kh·kw a tap,
//    slot kh·kw the bias; then each (slot, oc) sums the partials in chunk order.
// Activations come through loaders (load(index) -> float: f32, bf16 or f16 storage); weights and
// bias are f32.

namespace trainer::depthwise_math {

struct DwShape {
  int64_t n, ih, iw, c, oh, ow, oc;
  int m, kh, kw, sh, sw, dh, dw, pt, pl;
};

template <class LoadX>
TRAINER_HD_INLINE float forward_at(const DwShape& s, const LoadX& x, const float* w, const float* b, int64_t i) {
  const int64_t oc = i % s.oc;
  int64_t r = i / s.oc;
  const int64_t ox = r % s.ow;
  r /= s.ow;
  const int64_t oy = r % s.oh, n = r / s.oh;
  const int64_t c = oc / s.m;
  float acc = 0.0f;
  for (int ky = 0; ky < s.kh; ++ky) {
    const int64_t iy = oy * s.sh - s.pt + int64_t(ky) * s.dh;
    if (iy < 0 || iy >= s.ih) continue;
    const int64_t xrow = (n * s.ih + iy) * s.iw * s.c + c;
    const float* wrow = w + int64_t(ky) * s.kw * s.oc + oc;
    for (int kx = 0; kx < s.kw; ++kx) {
      const int64_t ix = ox * s.sw - s.pl + int64_t(kx) * s.dw;
      if (ix < 0 || ix >= s.iw) continue;
      acc = fmaf(x(xrow + ix * s.c), wrow[int64_t(kx) * s.oc], acc);
    }
  }
  return b ? acc + b[oc] : acc;
}

template <class LoadDy>
TRAINER_HD_INLINE float backward_data_at(const DwShape& s, const LoadDy& dy, const float* w, int64_t i) {
  const int64_t c = i % s.c;
  int64_t r = i / s.c;
  const int64_t ix = r % s.iw;
  r /= s.iw;
  const int64_t iy = r % s.ih, n = r / s.ih;
  float acc = 0.0f;
  for (int ky = 0; ky < s.kh; ++ky) {
    const int64_t ty = iy + s.pt - int64_t(ky) * s.dh;
    if (ty < 0 || ty % s.sh != 0) continue;
    const int64_t oy = ty / s.sh;
    if (oy >= s.oh) continue;
    for (int kx = 0; kx < s.kw; ++kx) {
      const int64_t tx = ix + s.pl - int64_t(kx) * s.dw;
      if (tx < 0 || tx % s.sw != 0) continue;
      const int64_t ox = tx / s.sw;
      if (ox >= s.ow) continue;
      const int64_t g = ((n * s.oh + oy) * s.ow + ox) * s.oc + c * s.m;
      const float* wt = w + (int64_t(ky) * s.kw + kx) * s.oc + c * s.m;
      for (int j = 0; j < s.m; ++j) acc = fmaf(dy(g + j), wt[j], acc);
    }
  }
  return acc;
}

// Chunks of the n·oh·ow rows for the filter gradient: about 32 rows or more each, at most 256
// chunks (enough threads to fill a GPU for the small late layers; bounded partials for the large
// early ones), none empty. A function of the shape alone.
TRAINER_HD_INLINE void filter_chunks(int64_t rows, int64_t& chunks, int64_t& rows_per_chunk) {
  chunks = (rows + 31) / 32;
  if (chunks < 1) chunks = 1;
  if (chunks > 256) chunks = 256;
  rows_per_chunk = (rows + chunks - 1) / chunks;
  chunks = rows_per_chunk > 0 ? (rows + rows_per_chunk - 1) / rows_per_chunk : 0;
}

// Partial i of [chunks][slots][oc]: the sum over rows [chunk·rows_per_chunk, + rows_per_chunk) of
// dy[row, oc]·x[the input under tap `slot`] (slot < kh·kw), or of dy[row, oc] (slot == kh·kw: bias).
template <class LoadX, class LoadDy>
TRAINER_HD_INLINE float filter_partial_at(const DwShape& s, const LoadX& x, const LoadDy& dy, int slots,
                                          int64_t rows_per_chunk, int64_t i) {
  const int64_t oc = i % s.oc;
  int64_t r = i / s.oc;
  const int slot = int(r % slots);
  const int64_t chunk = r / slots;
  const int64_t rows = s.n * s.oh * s.ow;
  const int64_t row0 = chunk * rows_per_chunk;
  const int64_t row1 = row0 + rows_per_chunk < rows ? row0 + rows_per_chunk : rows;
  float acc = 0.0f;
  if (slot == s.kh * s.kw) {
    for (int64_t row = row0; row < row1; ++row) acc += dy(row * s.oc + oc);
    return acc;
  }
  const int ky = slot / s.kw, kx = slot % s.kw;
  const int64_t c = oc / s.m;
  int64_t ox = row0 % s.ow, t = row0 / s.ow;
  int64_t oy = t % s.oh, n = t / s.oh;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t iy = oy * s.sh - s.pt + int64_t(ky) * s.dh, ix = ox * s.sw - s.pl + int64_t(kx) * s.dw;
    if (iy >= 0 && iy < s.ih && ix >= 0 && ix < s.iw)
      acc = fmaf(dy(row * s.oc + oc), x(((n * s.ih + iy) * s.iw + ix) * s.c + c), acc);
    if (++ox == s.ow) {
      ox = 0;
      if (++oy == s.oh) {
        oy = 0;
        ++n;
      }
    }
  }
  return acc;
}

// Output i of [slots][oc]: the chunks' partials summed in chunk order.
TRAINER_HD_INLINE float filter_sum_at(const float* partial, int64_t chunks, int64_t per_chunk, int64_t i) {
  float acc = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * per_chunk + i];
  return acc;
}

}  // namespace trainer::depthwise_math
