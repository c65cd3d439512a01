// Pooling op family: max/average 2-D pooling (Keras padding; average excludes the padding) and
// global average pooling.
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/window.h"

namespace trainer {

enum class PoolKind { Max, Avg };

struct Pool2dParams {
  PoolKind kind = PoolKind::Max;
  int kh = 2, kw = 2;
  int sh = 2, sw = 2;
  Padding padding = Padding::Valid;
};

inline Shape pool2d_output_shape(const Shape& hwc, const Pool2dParams& p) {
  return {window_1d(hwc[0], p.kh, p.sh, 1, p.padding).out, window_1d(hwc[1], p.kw, p.sw, 1, p.padding).out, hwc[2]};
}

// Everything a kernel needs about one call's shapes, computed once here for every backend: the
// input [n, ih, iw, c] and the windows along H and W (their `out` is the output size).
struct Pool2dGeometry {
  int64_t n, ih, iw, c;
  Window1d h, w;
  Shape output() const { return {n, h.out, w.out, c}; }
};

inline Pool2dGeometry pool2d_geometry(const Shape& x, const Pool2dParams& p) {
  return {x[0], x[1], x[2], x[3], window_1d(x[1], p.kh, p.sh, 1, p.padding), window_1d(x[2], p.kw, p.sw, 1, p.padding)};
}

// Activations x, y, dy, dx of one call share x's type (f32, bf16 or f16) and are NHWC.
inline void check_pool_input(const shape_checks::Checks& ck, const Tensor& x) {
  ck.floating("x", x);
  ck.has_rank("x", x, 4);
}

class Pool2dKernel {
 public:
  using Params = Pool2dParams;
  static constexpr const char* kName = "pool2d";
  virtual ~Pool2dKernel() = default;
  Pool2dKernel(const Pool2dKernel&) = delete;
  Pool2dKernel& operator=(const Pool2dKernel&) = delete;

  // x [N,H,W,C] -> y [N,OH,OW,C]. A kernel may keep what backward needs from its last forward.
  void forward(const Tensor& x, Tensor& y, bool training) {
    check_pool_input(ck_, x);
    const Pool2dGeometry g = pool2d_geometry(x.shape(), p_);
    ck_.like("y", y, x, g.output());
    forward_impl(g, x, y, training);
  }
  // dx overwritten; y (forward's output) may be unused by a backend.
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
    check_pool_input(ck_, x);
    const Pool2dGeometry g = pool2d_geometry(x.shape(), p_);
    ck_.like("dy", dy, x, g.output());
    ck_.like("dx", dx, x, x.shape());
    backward_impl(g, x, y, dy, dx);
  }

 protected:
  Pool2dKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1)
      ck_.fail("pool size ", p.kh, "x", p.kw, " and strides ", p.sh, "x", p.sw, " must be positive");
  }
  // Called with checked arguments only; g is pool2d_geometry(x.shape(), p_).
  virtual void forward_impl(const Pool2dGeometry& g, const Tensor& x, Tensor& y, bool training) = 0;
  virtual void backward_impl(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                             Tensor& dx) = 0;

  const Params p_;

 private:
  shape_checks::Checks ck_;
};

struct GlobalPoolParams {
  PoolKind kind = PoolKind::Avg;
};

class GlobalPoolKernel {
 public:
  using Params = GlobalPoolParams;
  static constexpr const char* kName = "global_pool";
  virtual ~GlobalPoolKernel() = default;
  GlobalPoolKernel(const GlobalPoolKernel&) = delete;
  GlobalPoolKernel& operator=(const GlobalPoolKernel&) = delete;

  // x [N,H,W,C] -> y [N,C] of x's type.
  void forward(const Tensor& x, Tensor& y) {
    check_pool_input(ck_, x);
    ck_.like("y", y, x, {x.dim(0), x.dim(3)});
    forward_impl(x, y);
  }
  // dx overwritten; y (forward's output) is read by max pooling only (undefined allowed otherwise).
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
    check_pool_input(ck_, x);
    ck_.like("dy", dy, x, {x.dim(0), x.dim(3)});
    ck_.like("dx", dx, x, x.shape());
    if (p_.kind == PoolKind::Max) ck_.like("y", y, x, {x.dim(0), x.dim(3)});
    backward_impl(x, y, dy, dx);
  }

 protected:
  GlobalPoolKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {}
  // Called with checked arguments only.
  virtual void forward_impl(const Tensor& x, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;

  const Params p_;

 private:
  shape_checks::Checks ck_;
};

}  // namespace trainer
