// Depthwise conv2d arithmetic of the GPU kernels: per-output accumulation (forward, backward data), the filter gradient's chunked partials and their fixed-order sum.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/ops/math/hd.h"

// NHWC activations, Keras kernel [kh, kw, C, M] (flat tap·C·M + oc), output channel oc = c·M + m.
// Each output value is summed by one thread in a fixed order (fmaf in float), so results are
// bit-reproducible (cuda_depthwise_conv2d.cu). The index arithmetic is done in the type I of the
// element index i: int32_t where every index of the call fits (a GPU's 64-bit divisions are
// emulated in tens of instructions, and these functions divide four times per element), int64_t
// otherwise; the sums are the same either way (kernel_math_conv_test.cpp checks both):
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

template <class LoadX, class I>
TRAINER_HD_INLINE float forward_at(const DwShape& s, const LoadX& x, const float* w, const float* b, I i) {
  const I soc = I(s.oc), sow = I(s.ow), soh = I(s.oh), sih = I(s.ih), siw = I(s.iw), sc = I(s.c);
  const I oc = i % soc;
  I r = i / soc;
  const I ox = r % sow;
  r /= sow;
  const I oy = r % soh, n = r / soh;
  const I c = oc / I(s.m);
  float acc = 0.0f;
  for (int ky = 0; ky < s.kh; ++ky) {
    const I iy = oy * I(s.sh) - I(s.pt) + I(ky) * I(s.dh);
    if (iy < 0 || iy >= sih) continue;
    const I xrow = (n * sih + iy) * siw * sc + c;
    const float* wrow = w + I(ky) * I(s.kw) * soc + oc;
    for (int kx = 0; kx < s.kw; ++kx) {
      const I ix = ox * I(s.sw) - I(s.pl) + I(kx) * I(s.dw);
      if (ix < 0 || ix >= siw) continue;
      acc = fmaf(x(xrow + ix * sc), wrow[I(kx) * soc], acc);
    }
  }
  return b ? acc + b[oc] : acc;
}

template <class LoadDy, class I>
TRAINER_HD_INLINE float backward_data_at(const DwShape& s, const LoadDy& dy, const float* w, I i) {
  const I sc = I(s.c), siw = I(s.iw), sih = I(s.ih), soh = I(s.oh), sow = I(s.ow), soc = I(s.oc), sm = I(s.m);
  const I c = i % sc;
  I r = i / sc;
  const I ix = r % siw;
  r /= siw;
  const I iy = r % sih, n = r / sih;
  float acc = 0.0f;
  for (int ky = 0; ky < s.kh; ++ky) {
    const I ty = iy + I(s.pt) - I(ky) * I(s.dh);
    if (ty < 0) continue;
    // The tap reaches a row of y only where the stride divides exactly (no division at stride 1,
    // the common case: a division is the dearest instruction of this loop on a GPU).
    const I oy = s.sh == 1 ? ty : ty / I(s.sh);
    if ((s.sh != 1 && oy * I(s.sh) != ty) || oy >= soh) continue;
    for (int kx = 0; kx < s.kw; ++kx) {
      const I tx = ix + I(s.pl) - I(kx) * I(s.dw);
      if (tx < 0) continue;
      const I ox = s.sw == 1 ? tx : tx / I(s.sw);
      if ((s.sw != 1 && ox * I(s.sw) != tx) || ox >= sow) continue;
      const I g = ((n * soh + oy) * sow + ox) * soc + c * sm;
      const float* wt = w + (I(ky) * I(s.kw) + I(kx)) * soc + c * sm;
      for (int j = 0; j < s.m; ++j) acc = fmaf(dy(g + I(j)), wt[j], acc);
    }
  }
  return acc;
}

// Chunks of the n·oh·ow rows for the filter gradient: about `target` rows or more each (32 here),
// at most `most` chunks (256 here: enough threads to fill a GPU for the small late layers; bounded
// partials for the large early ones), none empty. A function of the shape alone.
TRAINER_HD_INLINE void filter_chunks(int64_t rows, int64_t& chunks, int64_t& rows_per_chunk, int64_t target = 32,
                                     int64_t most = 256) {
  chunks = (rows + target - 1) / target;
  if (chunks < 1) chunks = 1;
  if (chunks > most) chunks = most;
  rows_per_chunk = (rows + chunks - 1) / chunks;
  chunks = rows_per_chunk > 0 ? (rows + rows_per_chunk - 1) / rows_per_chunk : 0;
}

// Partial i of [chunks][slots][oc]: the sum over rows [chunk·rows_per_chunk, + rows_per_chunk) of
// dy[row, oc]·x[the input under tap `slot`] (slot < kh·kw), or of dy[row, oc] (slot == kh·kw: bias).
template <class LoadX, class LoadDy, class I>
TRAINER_HD_INLINE float filter_partial_at(const DwShape& s, const LoadX& x, const LoadDy& dy, int slots,
                                          int64_t rows_per_chunk, I i) {
  const I soc = I(s.oc), sow = I(s.ow), soh = I(s.oh), sih = I(s.ih), siw = I(s.iw), sc = I(s.c);
  const I oc = i % soc;
  I r = i / soc;
  const int slot = int(r % I(slots));
  const I chunk = r / I(slots);
  const I rows = I(s.n) * soh * sow;
  const I row0 = chunk * I(rows_per_chunk);
  const I row1 = row0 + I(rows_per_chunk) < rows ? row0 + I(rows_per_chunk) : rows;
  float acc = 0.0f;
  if (slot == s.kh * s.kw) {
    for (I row = row0; row < row1; ++row) acc += dy(row * soc + oc);
    return acc;
  }
  const int ky = slot / s.kw, kx = slot % s.kw;
  const I c = oc / I(s.m);
  const I dyy = I(ky) * I(s.dh) - I(s.pt), dxx = I(kx) * I(s.dw) - I(s.pl);
  I ox = row0 % sow, t = row0 / sow;
  I oy = t % soh, n = t / soh;
  for (I row = row0; row < row1; ++row) {
    const I iy = oy * I(s.sh) + dyy, ix = ox * I(s.sw) + dxx;
    if (iy >= 0 && iy < sih && ix >= 0 && ix < siw)
      acc = fmaf(dy(row * soc + oc), x(((n * sih + iy) * siw + ix) * sc + c), acc);
    if (++ox == sow) {
      ox = 0;
      if (++oy == soh) {
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
