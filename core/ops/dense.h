// Dense op family: fully connected layer, x [N,K] * w [K,U] + b [U] (Keras kernel layout).
#pragma once
#include <utility>
#include <vector>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct DenseParams {
  int64_t units = 0;
  bool bias = true;
};

// x [..., K] -> [..., units] (Keras applies Dense to the last axis).
inline Shape dense_output_shape(const Shape& x, const DenseParams& p) {
  std::vector<int64_t> d = x.dims();
  d.back() = p.units;
  return Shape(std::move(d));
}

class DenseKernel {
 public:
  using Params = DenseParams;
  static constexpr const char* kName = "dense";
  virtual ~DenseKernel() = default;
  DenseKernel(const DenseKernel&) = delete;
  DenseKernel& operator=(const DenseKernel&) = delete;

  // x [..., K] (rank >= 2), w [K, units], b [units] (ignored, may be undefined, when !bias) ->
  // y [..., units]. w, b and their gradients are f32; x, y, dy and dx are f32, or all of the
  // context's low type (bf16, f16: the layer computing in it, MixedPrecision::Low). Under a
  // bf16/fp16 context the kernels round f32 operands (x, w, dy) to the low type inside the
  // multiplication and accumulate in f32 (ContextOptions::precision).
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
    const auto [rows, k] = check(x, w);
    if (p_.bias) ck_.shape("b", b, {p_.units});
    ck_.like("y", y, x, dense_output_shape(x.shape(), p_));
    forward_impl(rows, k, x, w, b, y);
  }
  // dw, db overwritten; dx (overwritten) may be undefined.
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
    const auto [rows, k] = check(x, w);
    ck_.like("dy", dy, x, dense_output_shape(x.shape(), p_));
    ck_.shape("dw", dw, {k, p_.units});
    if (p_.bias) ck_.shape("db", db, {p_.units});
    if (dx.defined()) ck_.like("dx", dx, x, x.shape());
    backward_impl(rows, k, x, w, dy, dx, dw, db);
  }

 protected:
  DenseKernel(const OpContext& c, const Params& p) : p_(p), low_(low_dtype(c.precision())), ck_(kName, c.device()) {
    if (p.units <= 0) ck_.fail("units must be positive, got ", p.units);
  }
  // Called with checked arguments only: x seen as [rows, k] (rows = 0 when k == 0).
  virtual void forward_impl(int64_t rows, int64_t k, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual void backward_impl(int64_t rows, int64_t k, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                             Tensor& dw, Tensor& db) = 0;

  const Params p_;
  const DType low_;  // the context's low type (F32 under fp32)

 private:
  std::pair<int64_t, int64_t> check(const Tensor& x, const Tensor& w) const {
    ck_.dtype("x", x, x.dtype() == low_ ? low_ : DType::F32);
    ck_.min_rank("x", x, 2);
    const auto rk = shape_checks::rows_by_last(x);
    ck_.shape("w", w, {rk.second, p_.units});
    return rk;
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
