// Multiply op family: the element-wise product of two tensors, the second broadcast over the first's leading positions (Keras's Multiply: a squeeze-and-excitation gate [C] over an image [H, W, C]).
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct MultiplyParams {};

class MultiplyKernel {
 public:
  using Params = MultiplyParams;
  static constexpr const char* kName = "multiply";
  virtual ~MultiplyKernel() = default;
  MultiplyKernel(const MultiplyKernel&) = delete;
  MultiplyKernel& operator=(const MultiplyKernel&) = delete;

  // a [N, P, C], b [N, C], y [N, P, C]: y[n, p, c] = a[n, p, c]·b[n, c] (P = 1: the same shape),
  // all of one float type, computed in f32 and rounded once. y may be a (not b).
  void forward(const Tensor& a, const Tensor& b, Tensor& y) {
    check(a, b);
    ck_.like("y", y, a, a.shape());
    if (y.data() == b.data() && b.numel() > 0) ck_.fail("y must not alias b");
    forward_impl(a, b, y);
  }
  // da = dy·b (broadcast), db[n, c] = Σ_p dy[n, p, c]·a[n, p, c] (products exact in double, summed
  // over p in order, rounded once: the same bits on every backend); either output may be undefined.
  // da may alias dy; db aliases nothing.
  void backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) {
    check(a, b);
    ck_.like("dy", dy, a, a.shape());
    if (da.defined()) ck_.like("da", da, a, a.shape());
    if (db.defined()) ck_.like("db", db, b, b.shape());
    backward_impl(a, b, dy, da, db);
  }

 protected:
  MultiplyKernel(const OpContext& c, const Params&) : ck_(kName, c.device()) {}
  // Called with checked arguments only: N = a.dim(0), C = b.dim(1), P = a.dim(1).
  virtual void forward_impl(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) = 0;

 private:
  void check(const Tensor& a, const Tensor& b) const {
    ck_.floating("a", a);
    ck_.has_rank("a", a, 3);
    ck_.like("b", b, a, Shape{a.dim(0), a.dim(2)});
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
