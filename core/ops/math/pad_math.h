// Zero-padding index math of the GPU kernels (pad2d, and conv2d's explicit bottom/right padding), host- and device-callable.
#pragma once
#include <cstdint>

#include "core/ops/math/hd.h"

// NHWC x [n, h, w, c] inside y [n, oh, ow, c] at (top, left); the rest of y is zero. Only indices
// are computed here: the kernels copy the element's bits (no conversion) or store a zero.

namespace trainer::pad_math {

struct PadShape {
  int64_t n, h, w, c, oh, ow;
  int top, left;
};

// The x element under y element i, or -1 where i is in the zero border.
TRAINER_HD_INLINE int64_t forward_source(const PadShape& s, int64_t i) {
  const int64_t ch = i % s.c;
  int64_t r = i / s.c;
  const int64_t ix = r % s.ow - s.left;
  r /= s.ow;
  const int64_t iy = r % s.oh - s.top, b = r / s.oh;
  return (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) ? ((b * s.h + iy) * s.w + ix) * s.c + ch : -1;
}

// Backward (a crop): the dy element that x element i was copied to.
TRAINER_HD_INLINE int64_t backward_source(const PadShape& s, int64_t i) {
  const int64_t ch = i % s.c;
  int64_t r = i / s.c;
  const int64_t ix = r % s.w;
  r /= s.w;
  const int64_t iy = r % s.h, b = r / s.h;
  return ((b * s.oh + iy + s.top) * s.ow + ix + s.left) * s.c + ch;
}

}  // namespace trainer::pad_math
