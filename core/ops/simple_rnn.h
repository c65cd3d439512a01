// SimpleRNN op family: one Keras SimpleRNN layer (h_t = act(x_t·W + b + h_{t-1}·R), zero initial state) over x [N, T, F].
#pragma once
#include <cstdint>
#include <stdexcept>

#include "core/ops/math/simple_rnn_math.h"
#include "core/ops/recurrent.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

// Keras semantics (keras.layers.SimpleRNN): W [F, U], R [U, U], b [U]; the output is every h_t
// ([N, T, U], return_sequences) or the last one ([N, U]).
struct SimpleRnnParams {
  int64_t units = 0;
  bool return_sequences = false;
  bool bias = true;
  simple_rnn_math::Act activation = simple_rnn_math::Act::Tanh;
};

namespace simple_rnn {

using Dims = recurrent::Dims;

inline Shape output_shape(const Dims& d, const SimpleRnnParams& p) {
  return recurrent::output_shape(d, p.return_sequences);
}

}  // namespace simple_rnn

class SimpleRnnKernel {
 public:
  using Params = SimpleRnnParams;
  static constexpr const char* kName = "simple_rnn";
  virtual ~SimpleRnnKernel() = default;
  SimpleRnnKernel(const SimpleRnnKernel&) = delete;
  SimpleRnnKernel& operator=(const SimpleRnnKernel&) = delete;

  // y = SimpleRNN(x) ([N, T, U] or [N, U]); every tensor f32: x [N, T, F] with T, F >= 1, w [F, U],
  // r [U, U], b [U] (ignored, may be undefined, without bias). A training forward keeps every step's
  // h_t in a workspace the kernel owns, for backward.
  void forward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y, bool training) {
    const simple_rnn::Dims d = check(x, w, r);
    if (p_.bias) ck_.shape("b", b, {d.u});
    ck_.shape("y", y, simple_rnn::output_shape(d, p_));
    kept_.forget();
    forward_impl(d, x, w, r, b, y, training);
    kept_.keep(d, training);
  }
  // Backpropagation through time from dy (the shape of y). Needs the latest forward to have been a
  // training one on this x, w, r, b; throws std::logic_error when none of x's shape is kept. dw,
  // dr, db (with bias) are overwritten; dx (overwritten) may be undefined.
  void backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dr,
                Tensor& db) {
    const simple_rnn::Dims d = check(x, w, r);
    ck_.shape("dy", dy, simple_rnn::output_shape(d, p_));
    ck_.shape("dw", dw, w.shape());
    ck_.shape("dr", dr, r.shape());
    if (p_.bias) ck_.shape("db", db, {d.u});
    if (dx.defined()) ck_.shape("dx", dx, x.shape());
    kept_.require(d, x, kName);
    backward_impl(d, x, w, r, dy, dx, dw, dr, db);
  }

 protected:
  SimpleRnnKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.units <= 0) ck_.fail("units must be positive, got ", p.units);
  }
  // Called with checked arguments only; backward_impl after a training forward_impl of d's shape
  // (or with d.n == 0: zero weight gradients).
  virtual void forward_impl(const simple_rnn::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r,
                            const Tensor& b, Tensor& y, bool training) = 0;
  virtual void backward_impl(const simple_rnn::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r,
                             const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) = 0;

  const Params p_;

 private:
  simple_rnn::Dims check(const Tensor& x, const Tensor& w, const Tensor& r) const {
    return recurrent::check(ck_, x, w, r, p_.units, 1);
  }
  shape_checks::Checks ck_;
  recurrent::Kept kept_;  // the kernel's workspace holds a training forward
};

}  // namespace trainer
