// LSTM op family: one Keras LSTM layer (gates i, f, c, o; tanh / sigmoid; zero initial state) over x [N, T, F].
#pragma once
#include <cstdint>
#include <stdexcept>

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

struct Dims {
  int64_t n, t, f, u;
};

inline Shape output_shape(const Dims& d, const LstmParams& p) {
  return p.return_sequences ? Shape{d.n, d.t, d.u} : Shape{d.n, d.u};
}

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
    kept_ = false;
    forward_impl(d, x, w, r, b, y, training);
    if (training && d.n > 0) {
      kept_ = true;
      kept_dims_ = d;
    }
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
    if (d.n > 0 && (!kept_ || kept_dims_.n != d.n || kept_dims_.t != d.t || kept_dims_.f != d.f))
      throw std::logic_error("lstm: backward without a training forward of this input shape [" + x.shape().str() +
                             "]");
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
    ck_.dtype("x", x, DType::F32);
    if (x.shape().rank() != 3) ck_.fail("x must be [batch, steps, features], got [", x.shape().str(), "]");
    const lstm::Dims d{x.dim(0), x.dim(1), x.dim(2), p_.units};
    if (d.t < 1 || d.f < 1) ck_.fail("x [", x.shape().str(), "] has no steps or no features");
    ck_.shape("w", w, {d.f, 4 * d.u});
    ck_.shape("r", r, {d.u, 4 * d.u});
    return d;
  }
  shape_checks::Checks ck_;
  bool kept_ = false;  // the kernel's workspace holds a training forward of kept_dims_
  lstm::Dims kept_dims_{};
};

}  // namespace trainer
