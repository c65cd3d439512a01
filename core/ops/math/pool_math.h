// Pooling arithmetic of the GPU kernels (2-D windows with Keras padding, global pooling), host- and device-callable; the CPU's global pooling shares the per-step rules.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/ops/math/hd.h"

// Semantics (the float64 reference in tests/unit/ops/reference.cpp):
//   max: the largest in-bounds value; its gradient goes to the first position, in row-major
//        window order, holding that maximum (strict '>' scan);
//   avg: the mean of the in-bounds values (padding excluded from the count).
// Values come through a loader: load(index) returns the element at that flat NHWC index as a
// float (the kernels read f32, bf16 or f16 storage; the host tests read arrays).

namespace trainer::pool_math {

struct PoolGeom {
  int n, ih, iw, c, oh, ow;
  int kh, kw, sh, sw;
  int pt, pl;  // padding before (top, left); the padding after is implied by oh/ow
};

// The in-bounds part [k0, k1) of a window of size k starting at input row (or column) `start`.
TRAINER_HD_INLINE void clip_window(int start, int k, int in, int& k0, int& k1) {
  k0 = start < 0 ? -start : 0;
  k1 = in - start < k ? in - start : k;
  if (k1 < k0) k1 = k0;
}

// The outputs o in [o0, o1] (inclusive; empty when o1 < o0) whose window, starting at o·s - p with
// size k, covers input index i: o·s - p <= i <= o·s - p + k - 1.
TRAINER_HD_INLINE void covering(int i, int k, int s, int p, int out, int& o0, int& o1) {
  const int lo = i + p - k + 1;  // o·s >= lo
  o0 = lo <= 0 ? 0 : (lo + s - 1) / s;
  o1 = (i + p) / s;  // i + p >= 0
  if (o1 > out - 1) o1 = out - 1;
}

// Output element i's window: the flat index of x[n, 0, 0, c], its top-left input position and the
// in-bounds tap ranges [ky0, ky1) x [kx0, kx1).
struct Window {
  int64_t base;
  int y0, x0, ky0, ky1, kx0, kx1;
};

TRAINER_HD_INLINE Window output_window(const PoolGeom& g, int64_t i) {
  const int c = int(i % g.c);
  int64_t r = i / g.c;
  const int ox = int(r % g.ow);
  r /= g.ow;
  const int oy = int(r % g.oh);
  const int64_t n = r / g.oh;
  Window w;
  w.base = n * g.ih * g.iw * g.c + c;
  w.y0 = oy * g.sh - g.pt;
  w.x0 = ox * g.sw - g.pl;
  clip_window(w.y0, g.kh, g.ih, w.ky0, w.ky1);
  clip_window(w.x0, g.kw, g.iw, w.kx0, w.kx1);
  return w;
}

// The number of in-bounds values of a window (avg pooling's divisor; >= 1 for Keras' windows).
TRAINER_HD_INLINE int in_bounds_count(const Window& w) { return (w.ky1 - w.ky0) * (w.kx1 - w.kx0); }

// Max pooling: the maximum, and in `arg` its input position iy·iw + ix (the first in-bounds
// position when no value exceeds -inf). A NaN in the window is the maximum (the first one's
// position), as PyTorch's max_pool2d: a diverged activation reaches the loss.
template <class Load>
TRAINER_HD_INLINE float window_max(const PoolGeom& g, const Window& w, const Load& x, int& arg) {
  float best = -HUGE_VALF;
  arg = (w.y0 + w.ky0) * g.iw + (w.x0 + w.kx0);
  for (int ky = w.ky0; ky < w.ky1; ++ky)
    for (int kx = w.kx0; kx < w.kx1; ++kx) {
      const int pos = (w.y0 + ky) * g.iw + (w.x0 + kx);
      const float v = x(w.base + int64_t(pos) * g.c);
      if (v > best || (v != v && best == best)) {
        best = v;
        arg = pos;
      }
    }
  return best;
}

// Avg pooling: the in-bounds values summed in row-major window order in float, divided by their
// count (0 for an empty window).
template <class Load>
TRAINER_HD_INLINE float window_avg(const PoolGeom& g, const Window& w, const Load& x) {
  float s = 0.0f;
  for (int ky = w.ky0; ky < w.ky1; ++ky)
    for (int kx = w.kx0; kx < w.kx1; ++kx) s += x(w.base + int64_t((w.y0 + ky) * g.iw + (w.x0 + kx)) * g.c);
  const int cnt = in_bounds_count(w);
  return cnt > 0 ? s / float(cnt) : 0.0f;
}

// Backward as a gather, for input element i: the sum over the outputs whose window covers it (oy,
// then ox ascending) of max: dy if i's position is that output's argmax (arg, per output element);
// avg: dy / (that window's in-bounds count).
template <class LoadDy>
TRAINER_HD_INLINE float input_grad(const PoolGeom& g, int64_t i, bool is_max, const int* arg, const LoadDy& dy) {
  const int c = int(i % g.c);
  int64_t r = i / g.c;
  const int ix = int(r % g.iw);
  r /= g.iw;
  const int iy = int(r % g.ih);
  const int64_t n = r / g.ih;
  int oy0, oy1, ox0, ox1;
  covering(iy, g.kh, g.sh, g.pt, g.oh, oy0, oy1);
  covering(ix, g.kw, g.sw, g.pl, g.ow, ox0, ox1);
  const int pos = iy * g.iw + ix;
  float acc = 0.0f;
  for (int oy = oy0; oy <= oy1; ++oy) {
    int ky0, ky1;
    clip_window(oy * g.sh - g.pt, g.kh, g.ih, ky0, ky1);
    for (int ox = ox0; ox <= ox1; ++ox) {
      const int64_t o = ((n * g.oh + oy) * g.ow + ox) * g.c + c;
      if (is_max) {
        if (arg[o] == pos) acc += dy(o);
      } else {
        int kx0, kx1;
        clip_window(ox * g.sw - g.pl, g.kw, g.iw, kx0, kx1);
        acc += dy(o) / float((ky1 - ky0) * (kx1 - kx0));  // >= 1: the window covers (iy, ix)
      }
    }
  }
  return acc;
}

// --- Global pooling over the hw positions of one (sample, channel): the CPU's rules and order.

// 1/hw, the average's factor (hw >= 1).
TRAINER_HD_INLINE float global_inv(int64_t hw) { return 1.0f / float(hw); }

// One step of the max scan: a NaN, once seen, is the maximum (as window_max).
TRAINER_HD_INLINE float max_step(float acc, float v) { return v > acc || v != v ? v : acc; }

// Output of positions x(0), ..., x(hw - 1) in order: their float sum times inv, or their maximum.
template <class Load>
TRAINER_HD_INLINE float global_forward(int64_t hw, bool avg, float inv, const Load& x) {
  float o = avg ? 0.0f : -HUGE_VALF;
  for (int64_t s = 0; s < hw; ++s) o = avg ? o + x(s) : max_step(o, x(s));
  return avg ? o * inv : o;
}

// Max backward: the first position whose value equals the output y (which is one of them; the
// first NaN for a NaN y), or -1.
template <class Load>
TRAINER_HD_INLINE int64_t global_argmax(int64_t hw, float y, const Load& x) {
  const bool nan = y != y;
  for (int64_t s = 0; s < hw; ++s) {
    const float v = x(s);
    if (v == y || (nan && v != v)) return s;
  }
  return -1;
}

}  // namespace trainer::pool_math
