// LSTM op family: one Keras LSTM layer (gates i, f, c, o; tanh / sigmoid; zero initial state) over x [N, T, F].
#pragma once
#include <cstdint>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

// Keras semantics (tf.keras.layers.LSTM with its defaults, implementation 2):
//   z_t = x_t·W + h_{t-1}·R + b            W [F, 4U], R [U, 4U], b [4U]; columns [i | f | c | o]
//   i = σ(z_i)  f = σ(z_f)  g = tanh(z_c)  o = σ(z_o)
//   c_t = f ⊙ c_{t-1} + i ⊙ g              h_t = o ⊙ tanh(c_t)         h_{-1} = c_{-1} = 0
// The output is every h_t ([N, T, U], return_sequences) or the last one ([N, U]).
struct LstmParams {
  int64_t units = 0;
  bool return_sequences = false;
  bool bias = true;
};

// Shape logic shared by the backends (device and dtype checks are the backends' own).
namespace lstm {

struct Dims {
  int64_t n, t, f, u;
};

inline Shape output_shape(const Dims& d, const LstmParams& p) {
  return p.return_sequences ? Shape{d.n, d.t, d.u} : Shape{d.n, d.u};
}

inline void require(const char* name, const Tensor& t, const Shape& want) {
  if (!t.defined()) shape_checks::fail("lstm: ", name, " is undefined");
  if (t.shape() != want)
    shape_checks::fail("lstm: ", name, " has shape [", t.shape().str(), "], expected [", want.str(), "]");
}

// x [N, T, F] with T >= 1, w [F, 4U], r [U, 4U], and b [4U] with bias when b is given (backward
// passes none: it does not need the bias).
inline Dims dims(const LstmParams& p, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor* b) {
  if (p.units <= 0) shape_checks::fail("lstm: units must be positive, got ", p.units);
  if (!x.defined()) shape_checks::fail("lstm: x is undefined");
  if (x.shape().rank() != 3) shape_checks::fail("lstm: x must be [batch, steps, features], got [", x.shape().str(), "]");
  const Dims d{x.dim(0), x.dim(1), x.dim(2), p.units};
  if (d.t < 1 || d.f < 1) shape_checks::fail("lstm: x [", x.shape().str(), "] has no steps or no features");
  require("w", w, {d.f, 4 * d.u});
  require("r", r, {d.u, 4 * d.u});
  if (p.bias && b) require("b", *b, {4 * d.u});
  return d;
}

}  // namespace lstm

class LstmKernel {
 public:
  using Params = LstmParams;
  static constexpr const char* kName = "lstm";
  virtual ~LstmKernel() = default;
  // y = LSTM(x) ([N, T, U] or [N, U]); b is ignored (may be undefined) without bias. In training
  // mode the kernel keeps, in a workspace it owns, what backward needs (the activated gates and
  // the cell and hidden states of every step); inference keeps nothing.
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y,
                       bool training) = 0;
  // Backpropagation through time from dy (the shape of y: every step's gradient, or the last
  // step's only). Needs the latest forward to have been a training one on this x, w, r, b (and y,
  // its output); throws std::logic_error when no training forward of x's shape is kept. dw, dr,
  // db (with bias) are overwritten; dx (overwritten) may be undefined.
  virtual void backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& y, const Tensor& dy,
                        Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) = 0;
};

}  // namespace trainer
