// CUDA pool2d: NHWC max/avg pooling kernels of any float type with Keras padding (odd 'same' included), deterministic gather backward.
#include <climits>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/math/pool_math.h"
#include "core/ops/pooling.h"

// Why not cudnnPoolingForward/Backward: cuDNN pads symmetrically, and Keras' 'same' puts the odd
// padding row/column after (bottom/right); average pooling must also exclude that padding from its
// count, which explicit padding cannot express. These kernels implement the CPU backend's
// semantics directly (the float64 reference in tests/unit/ops/reference.cpp; the window arithmetic
// is pool_math.h's, tested on the host):
//   max: the largest in-bounds value; its gradient goes to the first position of the window, in
//        row-major window order, holding that maximum (strict '>' scan, as the reference);
//   avg: the mean of the in-bounds values (padding excluded from the count).
// Backward is a gather (one thread per input element summing the outputs whose window covers it
// in a fixed order): no atomics, bit-reproducible. Max pooling recomputes the argmax from x in
// backward, so forward keeps no state and any number of forwards may precede their backwards.

namespace trainer {
namespace {

constexpr const char* kOp = "pool2d";

using pool_math::PoolGeom;

// One thread per output element (c fastest: neighbouring threads read neighbouring channels).
// Max: y = the maximum (when y != nullptr) and arg = its input position iy * iw + ix (when
// arg != nullptr). Avg: y = the mean over the in-bounds window.
template <class T>
__global__ void pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int* __restrict__ arg, PoolGeom g,
                                    bool is_max) {
  const int64_t total = int64_t(g.n) * g.oh * g.ow * g.c;
  const cuda::Load<T> lx{x};
  CUDA_GRID_LOOP(i, total) {
    const pool_math::Window w = pool_math::output_window(g, i);
    if (is_max) {
      int best_pos;
      const float best = pool_math::window_max(g, w, lx, best_pos);
      if (y) y[i] = cuda::from_f32<T>(best);
      if (arg) arg[i] = best_pos;
    } else {
      y[i] = cuda::from_f32<T>(pool_math::window_avg(g, w, lx));
    }
  }
}

// One thread per input element: the gather of pool_math::input_grad.
template <class T>
__global__ void pool_backward_kernel(const T* __restrict__ dy, const int* __restrict__ arg, T* __restrict__ dx,
                                     PoolGeom g, bool is_max) {
  const int64_t total = int64_t(g.n) * g.ih * g.iw * g.c;
  const cuda::Load<T> ldy{dy};
  CUDA_GRID_LOOP(i, total) dx[i] = cuda::from_f32<T>(pool_math::input_grad(g, i, is_max, arg, ldy));
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " is too large");
  return int(v);
}

class CudaPool2d final : public Pool2dKernel {
 public:
  CudaPool2d(OpContext& ctx, const Pool2dParams& p) : Pool2dKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Pool2dGeometry& pg, const Tensor& x, Tensor& y, bool /*training*/) override {
    if (y.numel() == 0) return;
    const PoolGeom g = geometry(pg);
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(pool_forward_kernel<T>, cuda::grid_for(y.numel(), c_), cuda::kBlock, c_.stream(),
                     cuda::ptr<const T>(x), cuda::ptr<T>(y), nullptr, g, p_.kind == PoolKind::Max);
    });
  }

  // y is not needed: max pooling recomputes its argmax from x.
  void backward_impl(const Pool2dGeometry& pg, const Tensor& x, const Tensor& /*y*/, const Tensor& dy,
                     Tensor& dx) override {
    if (dx.numel() == 0) return;
    if (dy.numel() == 0) {  // no output covers anything
      c_.fill_zero(dx.data(), dx.bytes());
      return;
    }
    const PoolGeom g = geometry(pg);
    const bool is_max = p_.kind == PoolKind::Max;
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      const int* arg = nullptr;
      if (is_max) {  // the argmax scratch (grown on demand: no allocation once the shape is fixed)
        int* am = argmax_.as<int>(c_, size_t(dy.numel()));
        TRAINER_LAUNCH(pool_forward_kernel<T>, cuda::grid_for(dy.numel(), c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(x), nullptr, am, g, true);
        arg = am;
      }
      TRAINER_LAUNCH(pool_backward_kernel<T>, cuda::grid_for(dx.numel(), c_), cuda::kBlock, c_.stream(),
                     cuda::ptr<const T>(dy), arg, cuda::ptr<T>(dx), g, is_max);
    });
  }

  // The header's geometry as the kernels' int one (pool_math.h). Capability: positions iy * iw + ix
  // are ints (element indices are 64-bit), so larger sizes are refused.
  PoolGeom geometry(const Pool2dGeometry& pg) const {
    to_int(pg.ih * pg.iw, "H*W");
    PoolGeom g;
    g.n = to_int(pg.n, "batch");
    g.ih = int(pg.ih);
    g.iw = int(pg.iw);
    g.c = to_int(pg.c, "channels");
    g.oh = to_int(pg.h.out, "output height");
    g.ow = to_int(pg.w.out, "output width");
    g.kh = p_.kh, g.kw = p_.kw, g.sh = p_.sh, g.sw = p_.sw;
    g.pt = pg.h.pad_before, g.pl = pg.w.pad_before;
    return g;
  }

  CudaContext& c_;
  Scratch argmax_;  // i32: max pooling's argmax, recomputed in backward
};

static RegisterKernel<Pool2dKernel, CudaPool2d> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
