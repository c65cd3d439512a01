// Layer-norm op family: each row of x [..., C] normalised over its last axis, then scaled and shifted (Keras LayerNormalization).
#pragma once
#include <cstdint>
#include <stdexcept>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct LayerNormParams {
  int64_t features = 0;  // C, the last axis
  float epsilon = 1e-3f;  // Keras's default (PyTorch's nn.LayerNorm: 1e-5)
  bool center = true;     // beta
  bool scale = true;      // gamma
};

class LayerNormKernel {
 public:
  using Params = LayerNormParams;
  static constexpr const char* kName = "layer_norm";
  virtual ~LayerNormKernel() = default;
  LayerNormKernel(const LayerNormKernel&) = delete;
  LayerNormKernel& operator=(const LayerNormKernel&) = delete;

  // y = (x - mean)·rstd·gamma + beta over each row (layernorm_math.h); x and y f32 [..., C];
  // gamma and beta f32 [C], undefined (and not read) without scale / center. `stats` (where
  // keeps_stats()): an f32 [rows, 3] tensor the forward writes each row's statistics into, for a
  // backward of the same x to read instead of computing them again.
  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor* stats = nullptr) {
    const int64_t rows = check_x(x);
    ck_.shape("y", y, x.shape());
    check_params("gamma", gamma, "beta", &beta);
    if (stats) check_stats(*stats, rows);
    keep_ = stats ? stats->f32() : nullptr;
    forward_impl(rows, x, gamma, beta, y);
    keep_ = nullptr;
  }
  // Whether forward can keep the rows' statistics for backward (the CPU's: the same floats backward
  // would compute from x, so the same bits either way; others compute them again).
  virtual bool keeps_stats() const { return false; }
  // Whether backward can add the input gradient into dx (add_dx) instead of overwriting it: the
  // second consumer of a tensor adding its share in place of a separate sum (Layer::can_add_input_grad).
  virtual bool adds_dx() const { return false; }

  // dx (overwritten, or with add_dx where adds_dx() added to; undefined: not needed), dgamma and
  // dbeta (overwritten; undefined without scale / center) from x and dy. Deterministic: the
  // parameter sums' order depends on the shape alone, not on the thread count or the run.
  // `stats`: what a forward of this x kept (forward's `stats`), else null: computed again.
  void backward(const Tensor& x, const Tensor& gamma, const Tensor& dy, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                bool add_dx = false, const Tensor* stats = nullptr) {
    const int64_t rows = check_x(x);
    ck_.shape("dy", dy, x.shape());
    if (dx.defined()) ck_.shape("dx", dx, x.shape());
    check_params("gamma", gamma, nullptr, nullptr);
    check_params("dgamma", dgamma, "dbeta", &dbeta);
    ck_.add_into(add_dx, adds_dx(), dx);
    if (stats) check_stats(*stats, rows);
    kept_ = stats ? stats->f32() : nullptr;
    if (add_dx)
      backward_add_impl(rows, x, gamma, dy, dx, dgamma, dbeta);
    else
      backward_impl(rows, x, gamma, dy, dx, dgamma, dbeta);
    kept_ = nullptr;
  }

 protected:
  LayerNormKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.features <= 0) ck_.fail("features must be positive, got ", p.features);
    if (!(p.epsilon > 0.0f)) ck_.fail("epsilon must be positive, got ", p.epsilon);
  }
  // Called with checked arguments only: x seen as [rows, C].
  virtual void forward_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y) = 0;
  virtual void backward_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& dy, Tensor& dx,
                             Tensor& dgamma, Tensor& dbeta) = 0;
  // backward with dx added to: called only where adds_dx(), so a backend without it never is.
  virtual void backward_add_impl(int64_t, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
    throw std::logic_error("layer_norm: backward adding into dx on a backend without it");
  }

  const Params p_;
  // During forward_impl: where to write row r's (shift, mean, rstd) at 3r (null: not kept); during
  // backward_impl: where to read them (null: compute them from x). Set only where keeps_stats().
  float* keep_ = nullptr;
  const float* kept_ = nullptr;

 private:
  void check_stats(const Tensor& s, int64_t rows) const {
    if (!keeps_stats()) ck_.fail("row statistics given to a backend that does not keep them");
    ck_.dtype("stats", s, DType::F32);
    if (s.shape() != Shape{rows, 3}) ck_.fail("stats has shape [", s.shape().str(), "], expected [", rows, "x3]");
  }
  int64_t check_x(const Tensor& x) const {
    ck_.dtype("x", x, DType::F32);
    ck_.min_rank("x", x, 1);
    if (x.shape().back() != p_.features)
      ck_.fail("x has shape [", x.shape().str(), "], expected a last axis of ", p_.features);
    return shape_checks::rows_by_last(x).first;
  }
  // The scale (gamma, dgamma) and, when `b` is given, the shift (beta, dbeta): defined exactly
  // when the kernel has them.
  void check_params(const char* gname, const Tensor& g, const char* bname, const Tensor* b) const {
    if (p_.scale) ck_.vec(gname, g, p_.features, false);
    else if (g.defined()) ck_.fail(gname, " given to a layer norm without scale");
    if (!b) return;
    if (p_.center) ck_.vec(bname, *b, p_.features, false);
    else if (b->defined()) ck_.fail(bname, " given to a layer norm without center");
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
