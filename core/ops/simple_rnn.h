// SimpleRNN op family: one Keras SimpleRNN layer (h_t = act(x_t·W + b + h_{t-1}·R), zero initial state) over x [N, T, F].
#pragma once
#include <cstdint>
#include <stdexcept>

#include "core/ops/math/simple_rnn_math.h"
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

struct Dims {
  int64_t n, t, f, u;
};

inline Shape output_shape(const Dims& d, const SimpleRnnParams& p) {
  return p.return_sequences ? Shape{d.n, d.t, d.u} : Shape{d.n, d.u};
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
    kept_ = false;
    forward_impl(d, x, w, r, b, y, training);
    if (training && d.n > 0) {
      kept_ = true;
      kept_dims_ = d;
    }
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
    if (d.n > 0 && (!kept_ || kept_dims_.n != d.n || kept_dims_.t != d.t || kept_dims_.f != d.f))
      throw std::logic_error("simple_rnn: backward without a training forward of this input shape [" + x.shape().str() +
                             "]");
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
    ck_.dtype("x", x, DType::F32);
    if (x.shape().rank() != 3) ck_.fail("x must be [batch, steps, features], got [", x.shape().str(), "]");
    const simple_rnn::Dims d{x.dim(0), x.dim(1), x.dim(2), p_.units};
    if (d.t < 1 || d.f < 1) ck_.fail("x [", x.shape().str(), "] has no steps or no features");
    ck_.shape("w", w, {d.f, d.u});
    ck_.shape("r", r, {d.u, d.u});
    return d;
  }
  shape_checks::Checks ck_;
  bool kept_ = false;
  simple_rnn::Dims kept_dims_{};
};

}  // namespace trainer
