// GRU op family: one Keras GRU layer (reset_after, gates z, r, h; tanh / sigmoid; zero initial state) over x [N, T, F].
#pragma once
#include <cstdint>
#include <stdexcept>

#include "core/ops/recurrent.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

// Keras semantics (keras.layers.GRU with its defaults: reset_after=True, TensorFlow 2's and cuDNN's form):
//   a = x_t·W + b_in    m = h_{t-1}·R + b_rec     W [F, 3U], R [U, 3U], b [2, 3U]; columns [z | r | h]
//   z = σ(a_z + m_z)    r = σ(a_r + m_r)    hh = tanh(a_h + r ⊙ m_h)
//   h_t = z ⊙ h_{t-1} + (1 - z) ⊙ hh      h_{-1} = 0
// The output is every h_t ([N, T, U], return_sequences) or the last one ([N, U]).
struct GruParams {
  int64_t units = 0;
  bool return_sequences = false;
  bool bias = true;
};

namespace gru {

using Dims = recurrent::Dims;

inline Shape output_shape(const Dims& d, const GruParams& p) { return recurrent::output_shape(d, p.return_sequences); }

}  // namespace gru

class GruKernel {
 public:
  using Params = GruParams;
  static constexpr const char* kName = "gru";
  virtual ~GruKernel() = default;
  GruKernel(const GruKernel&) = delete;
  GruKernel& operator=(const GruKernel&) = delete;

  // y = GRU(x) ([N, T, U] or [N, U]); every tensor f32: x [N, T, F] with T, F >= 1, w [F, 3U],
  // r [U, 3U], b [2, 3U] (ignored, may be undefined, without bias). A training forward keeps, in a
  // workspace the kernel owns, what backward needs (the gates, m_h and the states of every step).
  void forward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y, bool training) {
    const gru::Dims d = check(x, w, r);
    if (p_.bias) ck_.shape("b", b, {2, 3 * d.u});
    ck_.shape("y", y, gru::output_shape(d, p_));
    kept_.forget();
    forward_impl(d, x, w, r, b, y, training);
    kept_.keep(d, training);
  }
  // Backpropagation through time from dy (the shape of y). Needs the latest forward to have been a
  // training one on this x, w, r, b; throws std::logic_error when none of x's shape is kept. dw,
  // dr, db (with bias) are overwritten; dx (overwritten) may be undefined.
  void backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dr,
                Tensor& db) {
    const gru::Dims d = check(x, w, r);
    ck_.shape("dy", dy, gru::output_shape(d, p_));
    ck_.shape("dw", dw, w.shape());
    ck_.shape("dr", dr, r.shape());
    if (p_.bias) ck_.shape("db", db, {2, 3 * d.u});
    if (dx.defined()) ck_.shape("dx", dx, x.shape());
    kept_.require(d, x, kName);
    backward_impl(d, x, w, r, dy, dx, dw, dr, db);
  }

 protected:
  GruKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.units <= 0) ck_.fail("units must be positive, got ", p.units);
  }
  // Called with checked arguments only; backward_impl after a training forward_impl of d's shape
  // (or with d.n == 0: zero weight gradients).
  virtual void forward_impl(const gru::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b,
                            Tensor& y, bool training) = 0;
  virtual void backward_impl(const gru::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy,
                             Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) = 0;

  const Params p_;

 private:
  gru::Dims check(const Tensor& x, const Tensor& w, const Tensor& r) const {
    return recurrent::check(ck_, x, w, r, p_.units, 3);
  }
  shape_checks::Checks ck_;
  recurrent::Kept kept_;  // the kernel's workspace holds a training forward
};

}  // namespace trainer
