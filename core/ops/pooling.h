// Pooling op family: max/average 2-D pooling (Keras padding; average excludes the padding) and
// global average pooling.
#pragma once
#include "core/ops/registry.h"
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

class Pool2dKernel {
 public:
  using Params = Pool2dParams;
  static constexpr const char* kName = "pool2d";
  virtual ~Pool2dKernel() = default;
  // x [N,H,W,C] -> y [N,OH,OW,C]. A kernel may keep what backward needs from its last forward.
  virtual void forward(const Tensor& x, Tensor& y, bool training) = 0;
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

struct GlobalPoolParams {
  PoolKind kind = PoolKind::Avg;
};

class GlobalPoolKernel {
 public:
  using Params = GlobalPoolParams;
  static constexpr const char* kName = "global_pool";
  virtual ~GlobalPoolKernel() = default;
  // x [N,H,W,C] -> y [N,C]
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

}  // namespace trainer
