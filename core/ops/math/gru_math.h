// GRU gate arithmetic shared by the CPU and CUDA kernels: one unit's gates and hidden update (Keras's reset_after form), and their backward.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/ops/math/activation_math.h"
#include "core/ops/math/hd.h"

// Keras gates (gru.h): a = x·W (+ b_in), m = h_{t-1}·R (+ b_rec), columns [z | r | h];
//   z = σ(a_z + m_z)  r = σ(a_r + m_r)  hh = tanh(a_h + r·m_h)  h_t = z·h_{t-1} + (1 - z)·hh.
// The GEMMs are the backends' own; everything per unit is here, in float, so both backends
// compute the same bits for the same projections.

namespace trainer::gru_math {

struct Cell {
  float z, r, hh;  // the activated gates (kept for backward)
  float mh;        // m_h with its bias (kept: the reset gate's gradient reads it)
  float h;         // h_t
};

// Unit j of one sample at one step: a* the input projection, m* the recurrent one (both without
// bias; m* 0 at the first step), b the bias [2, 3U] (input row, then recurrent row) or null,
// h_prev = h_{t-1} (0 at the first step).
TRAINER_HD_INLINE Cell cell_forward(float az, float ar, float ah, float mz, float mr, float mh, const float* b,
                                    int64_t U, int64_t j, float h_prev) {
  if (b) {
    az += b[j];
    ar += b[U + j];
    ah += b[2 * U + j];
    mz += b[3 * U + j];
    mr += b[4 * U + j];
    mh += b[5 * U + j];
  }
  Cell s;
  s.z = act::sigmoid(az + mz);
  s.r = act::sigmoid(ar + mr);
  s.mh = mh;
  s.hh = tanhf(ah + s.r * mh);
  s.h = s.z * h_prev + (1.0f - s.z) * s.hh;
  return s;
}

struct CellGrad {
  float daz, dar, dah;  // dL/d(input projection) of the three gates (the recurrent z and r columns get the same)
  float dmh;            // dL/dm_h (the recurrent h column)
  float dh_prev;        // dL/dh_{t-1} through h_t's z·h_{t-1} term (the recurrent GEMM adds the rest)
};

// Backward of cell_forward from the kept gates z, r, hh, m_h and h_prev, and gh = dL/dh_t (from
// step t + 1 plus the output's own gradient at this step).
TRAINER_HD_INLINE CellGrad cell_backward(float z, float r, float hh, float mh, float h_prev, float gh) {
  const float dhh = gh * (1.0f - z);
  const float dz = gh * (h_prev - hh);
  const float dah = dhh * (1.0f - hh * hh);
  const float dr = dah * mh;
  CellGrad d;
  d.daz = dz * z * (1.0f - z);
  d.dar = dr * r * (1.0f - r);
  d.dah = dah;
  d.dmh = dah * r;
  d.dh_prev = gh * z;
  return d;
}

}  // namespace trainer::gru_math
