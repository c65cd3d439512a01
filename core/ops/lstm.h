// LSTM op family: one Keras LSTM layer (gates i, f, c, o; tanh / sigmoid; zero initial state) over x [N, T, F].
#pragma once
#include <cstdint>
#include <stdexcept>

#include "core/ops/recurrent.h"
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

// Shape logic shared by the backends.
namespace lstm {

using Dims = recurrent::Dims;

inline Shape output_shape(const Dims& d, const LstmParams& p) { return recurrent::output_shape(d, p.return_sequences); }

}  // namespace lstm

class LstmKernel {
 public:
  using Params = LstmParams;
  static constexpr const char* kName = "lstm";
  virtual ~LstmKernel() = default;
  LstmKernel(const LstmKernel&) = delete;
  LstmKernel& operator=(const LstmKernel&) = delete;

  // y = LSTM(x) ([N, T, U] or [N, U]); every tensor f32: x [N, T, F] with T, F >= 1, w [F, 4U],
  // r [U, 4U], b [4U] (ignored, may be undefined, without bias). In training mode the kernel
  // keeps, in a workspace it owns, what backward needs (the activated gates and the cell and
  // hidden states of every step); inference keeps nothing.
  void forward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y, bool training) {
    const lstm::Dims d = check(x, w, r);
    if (p_.bias) ck_.shape("b", b, {4 * d.u});
    ck_.shape("y", y, lstm::output_shape(d, p_));
    kept_.forget();
    forward_impl(d, x, w, r, b, y, training);
    kept_.keep(d, training);
  }
  // Backpropagation through time from dy (the shape of y: every step's gradient, or the last
  // step's only). Needs the latest forward to have been a training one on this x, w, r, b (and y,
  // its output); throws std::logic_error when no training forward of x's shape is kept. dw, dr,
  // db (with bias) are overwritten; dx (overwritten) may be undefined.
  void backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& y, const Tensor& dy, Tensor& dx,
                Tensor& dw, Tensor& dr, Tensor& db) {
    const lstm::Dims d = check(x, w, r);
    const Shape out = lstm::output_shape(d, p_);
    ck_.shape("y", y, out);
    ck_.shape("dy", dy, out);
    ck_.shape("dw", dw, w.shape());
    ck_.shape("dr", dr, r.shape());
    if (p_.bias) ck_.shape("db", db, {4 * d.u});
    if (dx.defined()) ck_.shape("dx", dx, x.shape());
    kept_.require(d, x, kName);
    backward_impl(d, x, w, r, y, dy, dx, dw, dr, db);
  }

 protected:
  LstmKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.units <= 0) ck_.fail("units must be positive, got ", p.units);
  }
  // Called with checked arguments only. backward_impl is called after a training forward_impl of
  // d's shape (or with d.n == 0: nothing to propagate, zero weight gradients).
  virtual void forward_impl(const lstm::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b,
                            Tensor& y, bool training) = 0;
  virtual void backward_impl(const lstm::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& y,
                             const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) = 0;

  const Params p_;

 private:
  // x [N, T, F] with T, F >= 1, w [F, 4U], r [U, 4U].
  lstm::Dims check(const Tensor& x, const Tensor& w, const Tensor& r) const {
    return recurrent::check(ck_, x, w, r, p_.units, 4);
  }
  shape_checks::Checks ck_;
  recurrent::Kept kept_;  // the kernel's workspace holds a training forward
};

}  // namespace trainer
