// Zero-padding index math of the GPU kernels (pad2d, and conv2d's explicit padding beyond cuDNN's symmetric pad), host- and device-callable.
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

// The x element under y element i, or -1 where i is in the zero border. The arithmetic is in i's
// type: int32_t in the GPU kernels where every index fits (cuda::with_index_type), int64_t else.
template <class I>
TRAINER_HD_INLINE I forward_source(const PadShape& s, I i) {
  const I c = I(s.c), ow = I(s.ow), oh = I(s.oh), h = I(s.h), w = I(s.w);
  const I ch = i % c;
  I r = i / c;
  const I ix = r % ow - I(s.left);
  r /= ow;
  const I iy = r % oh - I(s.top), b = r / oh;
  return (iy >= 0 && iy < h && ix >= 0 && ix < w) ? ((b * h + iy) * w + ix) * c + ch : I(-1);
}

// Backward (a crop): the dy element that x element i was copied to.
template <class I>
TRAINER_HD_INLINE I backward_source(const PadShape& s, I i) {
  const I c = I(s.c), w = I(s.w), h = I(s.h);
  const I ch = i % c;
  I r = i / c;
  const I ix = r % w;
  r /= w;
  const I iy = r % h, b = r / h;
  return ((b * I(s.oh) + iy + I(s.top)) * I(s.ow) + ix + I(s.left)) * c + ch;
}

// A convolution's padding before and after one axis as cuDNN takes it: the same `both` on each side,
// and the rest as explicit zeros (`before`, `after`) in a padded copy of the input: Keras's 'same'
// leaves at most one zero after (pads 0/1 give both 0, after 1), conv1d's causal padding all of it
// before (pads 4/0 give both 0, before 4).
struct PadSplit {
  int both, before, after;
};
TRAINER_HD_INLINE PadSplit split_symmetric(int pad_before, int pad_after) {
  const int both = pad_before < pad_after ? pad_before : pad_after;
  return {both, pad_before - both, pad_after - both};
}

}  // namespace trainer::pad_math
