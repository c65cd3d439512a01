// Nearest-neighbour upsampling's index arithmetic shared by the CPU and CUDA kernels: the input element an output copies, and an input element's gradient summed over its block.
#pragma once
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

}  // namespace trainer::upsample
