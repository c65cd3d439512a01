// LSTM gate arithmetic shared by the CPU and CUDA kernels: one unit's gates, cell and hidden update, and their backward.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/ops/math/activation_math.h"
#include "core/ops/math/hd.h"

// Keras gates (lstm.h): z = x·W + h_{t-1}·R (+ b), columns [i | f | c | o];
//   i = σ(z_i)  f = σ(z_f)  g = tanh(z_c)  o = σ(z_o)   c_t = f·c_{t-1} + i·g   h_t = o·tanh(c_t).
// The GEMMs are the backends' own (oneDNN sgemm, cuBLAS); everything per unit is here, in float,
// so both backends compute the same bits for the same pre-activations.

namespace trainer::lstm_math {

struct Cell {
  float i, f, g, o;  // the activated gates (kept for backward)
  float c, h;        // c_t, h_t
};

// Unit j of one sample at one step: z* its pre-activations (without bias), b the bias [4U] or
// null, c_prev = c_{t-1} (ignored at the first step, has_prev false: c_{-1} = 0).
TRAINER_HD_INLINE Cell cell_forward(float zi, float zf, float zc, float zo, const float* b, int64_t U, int64_t j,
                                    float c_prev, bool has_prev) {
  if (b) {
    zi += b[j];
    zf += b[U + j];
    zc += b[2 * U + j];
    zo += b[3 * U + j];
  }
  Cell s;
  s.i = act::sigmoid(zi);
  s.f = act::sigmoid(zf);
  s.g = tanhf(zc);
  s.o = act::sigmoid(zo);
  s.c = (has_prev ? s.f * c_prev : 0.0f) + s.i * s.g;
  s.h = s.o * tanhf(s.c);
  return s;
}

struct CellGrad {
  float dzi, dzf, dzc, dzo;  // dL/dz of the four gates
  float dc_prev;             // dL/dc_{t-1}
};

// Backward of cell_forward from the activated gates i, f, g, o, c = c_t, c_prev = c_{t-1} (when
// has_prev), and the incoming gradients: dh = dL/dh_t through step t + 1, dy = the output's own
// gradient at this step (0 where the output does not expose h_t), dc = dL/dc_t through step t + 1
// (both 0 at the last step).
TRAINER_HD_INLINE CellGrad cell_backward(float i, float f, float g, float o, float c, float c_prev, bool has_prev,
                                         float dh, float dy, float dc) {
  const float tc = tanhf(c);
  const float gh = dh + dy;
  const float gc = dc + gh * o * (1.0f - tc * tc);
  CellGrad d;
  d.dzi = gc * g * i * (1.0f - i);
  d.dzf = has_prev ? gc * c_prev * f * (1.0f - f) : 0.0f;
  d.dzc = gc * i * (1.0f - g * g);
  d.dzo = gh * tc * o * (1.0f - o);
  d.dc_prev = gc * f;
  return d;
}

}  // namespace trainer::lstm_math
