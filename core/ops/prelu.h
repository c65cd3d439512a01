// PReLU op family: Keras's PReLU, y = x where x > 0 and alpha·x elsewhere, alpha learned per position with some axes shared, and its gradients.
#pragma once
#include <vector>

#include "core/ops/math/prelu_math.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct PReluParams {
  // Per sample axis of x (x's shape without the batch): whether alpha is shared along it (has 1
  // there). Its length is x's rank − 1.
  std::vector<bool> shared;
};

class PReluKernel {
 public:
  using Params = PReluParams;
  static constexpr const char* kName = "prelu";
  virtual ~PReluKernel() = default;
  PReluKernel(const PReluKernel&) = delete;
  PReluKernel& operator=(const PReluKernel&) = delete;

  // x [N, d1, ..., dk] (f32, or bf16 / f16), alpha [a1, ..., ak] f32 with ai = 1 where axis i is
  // shared and di elsewhere; y of x's shape and type (may be x): prelu_math::forward, in f32,
  // rounded once.
  void forward(const Tensor& x, const Tensor& alpha, Tensor& y) {
    const prelu_math::Index ix = check(x, alpha);
    ck_.like("y", y, x, x.shape());
    forward_impl(ix, x, alpha, y);
  }
  // dx = prelu_math::input_grad (x's type; may be dy; undefined: not wanted) and dalpha (f32,
  // alpha's shape; undefined: not wanted) = Σ over the batch and the shared axes of dy·min(x, 0),
  // each product exact and the sum in double, rounded once: within one f32 rounding of the exact
  // sum on every backend, the same bits at any thread count.
  void backward(const Tensor& x, const Tensor& alpha, const Tensor& dy, Tensor& dx, Tensor& dalpha) {
    const prelu_math::Index ix = check(x, alpha);
    ck_.like("dy", dy, x, x.shape());
    if (dx.defined()) {
      ck_.like("dx", dx, x, x.shape());
      if (x.numel() && dx.data() == x.data()) ck_.fail("dx aliases x");
    }
    if (dalpha.defined()) ck_.shape("dalpha", dalpha, alpha.shape());
    backward_impl(ix, x, alpha, dy, dx, dalpha);
  }

 protected:
  PReluKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {}
  // Called with checked arguments only; ix maps x's samples onto alpha.
  virtual void forward_impl(const prelu_math::Index& ix, const Tensor& x, const Tensor& alpha, Tensor& y) = 0;
  virtual void backward_impl(const prelu_math::Index& ix, const Tensor& x, const Tensor& alpha, const Tensor& dy,
                             Tensor& dx, Tensor& dalpha) = 0;

  const Params p_;

 private:
  prelu_math::Index check(const Tensor& x, const Tensor& alpha) const {
    ck_.floating("x", x);
    const size_t k = p_.shared.size();
    ck_.has_rank("x", x, k + 1);
    std::vector<int64_t> dims(k), want(k);
    for (size_t i = 0; i < k; ++i) {
      dims[i] = x.dim(i + 1);
      want[i] = p_.shared[i] ? 1 : dims[i];
    }
    ck_.shape("alpha", alpha, Shape(want));
    prelu_math::Index ix;
    if (!prelu_math::make_index(dims, p_.shared, ix))
      ck_.fail("x [", x.shape().str(), "] alternates shared and unshared axes more than ", prelu_math::kMaxRank, " times");
    return ix;
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
