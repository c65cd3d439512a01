// Group-norm op family: Keras's GroupNormalization, each sample's channels split into groups normalised over the group's channels and every position, then scaled and shifted per channel.
#pragma once
#include <cstdint>

#include "core/ops/math/group_norm_math.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct GroupNormParams {
  int64_t groups = 32;    // Keras's default; C must be a multiple
  float epsilon = 1e-3f;  // Keras's default (PyTorch's nn.GroupNorm: 1e-5)
  bool center = true;     // beta
  bool scale = true;      // gamma
};

class GroupNormKernel {
 public:
  using Params = GroupNormParams;
  static constexpr const char* kName = "group_norm";
  virtual ~GroupNormKernel() = default;
  GroupNormKernel(const GroupNormKernel&) = delete;
  GroupNormKernel& operator=(const GroupNormKernel&) = delete;

  // x [N, ..., C] f32 (rank >= 2: the middle axes are the positions), C a multiple of groups; y of
  // x's shape (not x); gamma and beta f32 [C], undefined (and not read) without scale / center.
  // stats f32 [N, groups, 3]: each group's (shift, mean, rstd), written for backward.
  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& stats) {
    const gn::Shape3 s = check(x, stats);
    ck_.shape("y", y, x.shape());
    if (x.numel() && y.data() == x.data()) ck_.fail("y aliases x");
    check_params("gamma", gamma, p_.scale, s.C);
    check_params("beta", beta, p_.center, s.C);
    forward_impl(s, x, gamma, beta, y, stats);
  }
  // dx (undefined: not wanted; not x or dy), dgamma and dbeta (undefined: not wanted, as without scale / center) from
  // x, dy and the forward's stats of this x (layernorm_math.h's formulas per group). dgamma and
  // dbeta are sums over the samples and positions in double, rounded once: within an f32 rounding
  // of float64, the same bits at any thread count.
  void backward(const Tensor& x, const Tensor& gamma, const Tensor& dy, const Tensor& stats, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta) {
    const gn::Shape3 s = check(x, stats);
    ck_.shape("dy", dy, x.shape());
    check_params("gamma", gamma, p_.scale, s.C);
    check_grad("dgamma", dgamma, p_.scale, s.C);
    check_grad("dbeta", dbeta, p_.center, s.C);
    if (dx.defined()) {
      ck_.shape("dx", dx, x.shape());
      if (x.numel() && (dx.data() == x.data() || dx.data() == dy.data())) ck_.fail("dx aliases x or dy");
    }
    backward_impl(s, x, gamma, dy, stats, dx, dgamma, dbeta);
  }

 protected:
  GroupNormKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.groups < 1) ck_.fail("groups must be positive, got ", p.groups);
    if (!(p.epsilon > 0.0f)) ck_.fail("epsilon must be positive, got ", p.epsilon);
  }
  // Called with checked arguments only.
  virtual void forward_impl(const gn::Shape3& s, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                            Tensor& stats) = 0;
  virtual void backward_impl(const gn::Shape3& s, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                             const Tensor& stats, Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;

  const Params p_;

 private:
  gn::Shape3 check(const Tensor& x, const Tensor& stats) const {
    ck_.dtype("x", x, DType::F32);
    ck_.min_rank("x", x, 2);
    const int64_t C = x.shape().back(), N = x.dim(0);
    if (C % p_.groups != 0) ck_.fail("x's ", C, " channels are not a multiple of ", p_.groups, " groups");
    const int64_t P = C && N ? x.numel() / (N * C) : 0;
    ck_.shape("stats", stats, {N, p_.groups, 3});
    return {N, P, C, p_.groups};
  }
  void check_params(const char* name, const Tensor& t, bool present, int64_t C) const {
    if (present) ck_.shape(name, t, {C});
    else if (t.defined()) ck_.fail(name, " is given but the layer has none");
  }
  // A parameter's gradient: undefined when not wanted.
  void check_grad(const char* name, const Tensor& t, bool present, int64_t C) const {
    if (t.defined()) check_params(name, t, present, C);
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
