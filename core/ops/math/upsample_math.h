// Upsampling's arithmetic shared by the CPU and CUDA kernels: nearest (the input element an output copies, an input element's gradient summed over its block) and bilinear (TensorFlow's half-pixel taps, the value, and an input element's gradient gathered from the outputs that read it).
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/hd.h"

namespace trainer::upsample {

// Shapes of one call: x [N, H, W, C], y [N, H·sh, W·sw, C].
struct Dims {
  int64_t n, h, w, c;
  int sh, sw;
};

// The flat index into x that y's flat element o copies.
TRAINER_HD_INLINE int64_t source(const Dims& d, int64_t o) {
  const int64_t c = o % d.c, rest = o / d.c, ow = d.w * d.sw, j = rest % ow, rows = rest / ow, i = rows % (d.h * d.sh),
                n = rows / (d.h * d.sh);
  return ((n * d.h + i / d.sh) * d.w + j / d.sw) * d.c + c;
}

// dx's flat element k: the sum of dy over the sh x sw block that copied it, in row-major order, in f32.
template <class Load>
TRAINER_HD_INLINE float block_sum(const Dims& d, int64_t k, Load dy) {
  const int64_t c = k % d.c, rest = k / d.c, x = rest % d.w, rows = rest / d.w, y = rows % d.h, n = rows / d.h;
  const int64_t ow = d.w * d.sw;
  float s = 0.0f;
  for (int a = 0; a < d.sh; ++a)
    for (int b = 0; b < d.sw; ++b) s += dy(((n * d.h * d.sh + y * d.sh + a) * ow + x * d.sw + b) * d.c + c);
  return s;
}

// --- Bilinear (Keras's interpolation="bilinear": tf.image.resize with half-pixel centres and no
// antialiasing, which an integer upscale does not need; PyTorch's interpolate(mode="bilinear",
// align_corners=False)). Along one axis of n inputs scaled by s, output o reads inputs i0 and i1 with
// weight f on i1 — TensorFlow's compute_interpolation_weights, in f32 as it computes them:
// src = (o + 0.5)·(n / (n·s)) − 0.5, i0 = max(floor(src), 0), i1 = min(ceil(src), n − 1), f = src − floor(src)
// (before the first input's centre both taps are input 0, whatever f).
struct Tap {
  int64_t i0, i1;
  float f;
};
TRAINER_HD_INLINE Tap bilinear_tap(int64_t o, int64_t n, int s) {
  const float scale = float(n) / float(n * s);
  const float src = (float(o) + 0.5f) * scale - 0.5f;
  const float lo = floorf(src), hi = ceilf(src);
  Tap t;
  t.i0 = lo > 0.0f ? int64_t(lo) : 0;
  t.i1 = hi < float(n - 1) ? int64_t(hi) : n - 1;
  if (t.i1 < 0) t.i1 = 0;
  t.f = src - lo;
  return t;
}

// y's flat element o from x (TensorFlow's compute_lerp: the two rows' horizontal lerps, then the
// vertical one, in f32).
template <class Load>
TRAINER_HD_INLINE float bilinear_value(const Dims& d, int64_t o, Load x) {
  const int64_t c = o % d.c, rest = o / d.c, ow = d.w * d.sw, j = rest % ow, rows = rest / ow, i = rows % (d.h * d.sh),
                n = rows / (d.h * d.sh);
  const Tap ty = bilinear_tap(i, d.h, d.sh), tx = bilinear_tap(j, d.w, d.sw);
  auto at = [&](int64_t r, int64_t col) { return x(((n * d.h + r) * d.w + col) * d.c + c); };
  const float tl = at(ty.i0, tx.i0), tr = at(ty.i0, tx.i1), bl = at(ty.i1, tx.i0), br = at(ty.i1, tx.i1);
  const float top = tl + (tr - tl) * tx.f, bottom = bl + (br - bl) * tx.f;
  return top + (bottom - top) * ty.f;
}

// The weight of input k along one axis in output o's value: 1 − f on i0, f on i1 (both when they coincide).
TRAINER_HD_INLINE float bilinear_weight(const Tap& t, int64_t k) {
  return (t.i0 == k ? 1.0f - t.f : 0.0f) + (t.i1 == k ? t.f : 0.0f);
}

// dx's flat element k: Σ over the outputs that read it of wy·wx·dy, rows then columns in increasing
// order, in f32 (the outputs of rows (y − 1)·sh .. (y + 2)·sh − 1 cover every tap of input row y).
template <class Load>
TRAINER_HD_INLINE float bilinear_grad(const Dims& d, int64_t k, Load dy) {
  const int64_t c = k % d.c, rest = k / d.c, x = rest % d.w, rows = rest / d.w, y = rows % d.h, n = rows / d.h;
  const int64_t oh = d.h * d.sh, ow = d.w * d.sw;
  const int64_t r0 = (y - 1) * d.sh > 0 ? (y - 1) * d.sh : 0, r1 = (y + 2) * d.sh < oh ? (y + 2) * d.sh : oh;
  const int64_t c0 = (x - 1) * d.sw > 0 ? (x - 1) * d.sw : 0, c1 = (x + 2) * d.sw < ow ? (x + 2) * d.sw : ow;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float wy = bilinear_weight(bilinear_tap(r, d.h, d.sh), y);
    if (wy == 0.0f) continue;
    for (int64_t col = c0; col < c1; ++col) {
      const float wx = bilinear_weight(bilinear_tap(col, d.w, d.sw), x);
      if (wx != 0.0f) s += wy * wx * dy(((n * oh + r) * ow + col) * d.c + c);
    }
  }
  return s;
}

}  // namespace trainer::upsample
