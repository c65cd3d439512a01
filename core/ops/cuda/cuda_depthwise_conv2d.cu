// CUDA depthwise conv2d: hand-written NHWC kernels over f32/bf16/f16 activations (forward, backward data, backward filter in fixed order, no atomics).
#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_depthwise_tiled.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/depthwise_conv2d.h"
#include "core/ops/math/depthwise_math.h"

// Why not cuDNN: a depthwise convolution is a grouped one (groups = C), but cuDNN's fp32 NHWC
// grouped kernels are slow for depthwise shapes and its deterministic backward-filter choices for
// them are not documented per algorithm. These kernels are plain, and each output value is summed
// by one thread in a fixed order, so every result is bit-reproducible:
//  - forward: one thread per y element (n, oy, ox, oc), kh*kw multiply-adds; oc = c * M + m is the
//    innermost index, so a warp reads consecutive channels of x, w and writes consecutive y.
//  - backward data: one thread per dx element (n, iy, ix, c): the taps whose window covers (iy, ix)
//    (oy = (iy + pt - ky * dh) / sh where that divides exactly) and the M filters of channel c.
//  - backward filter (and bias): the rows n*oh*ow of dy are cut into P chunks (P depends on the
//    shape only); one thread per (chunk, tap or bias, oc) sums its chunk's rows in order into a
//    partial, then one thread per (tap or bias, oc) sums the P partials in chunk order. The Keras
//    kernel [kh, kw, C, M] has flat index tap * C * M + oc, so dw is written in place.
// Keras' asymmetric 'same' padding is just (pt, pl) and the bounds checks: nothing is copied.
// The per-element functions are depthwise_math.h's, host and device: the tests call them on the host
// in plain loops over every index against the float64 reference (kernel_math_conv_test.cpp: random
// shapes with multipliers 1-3, kernels 1-7, strides 1-3, dilation, both paddings).
// The fast path dw_tiled (cuda_depthwise_tiled.cu; off by default until measured on a GPU) takes
// 3x3 and 5x5 windows at stride 1 or 2 with kernels specialised to them; these general kernels are
// its reference path and run every other call.
// Mixed precision: x, y, dy and dx are of one type T (f32, bf16 or f16), read into float and
// rounded once when stored; weights, bias and their gradients stay f32 (the master weights, used
// as they are: more exact than the CPU's bf16 copy of them, within the same bound).

namespace trainer {
namespace {

constexpr const char* kOp = "depthwise_conv2d";

using depthwise_math::DwShape;

template <class T, class I>
__global__ void dw_forward_kernel(DwShape s, const T* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, T* __restrict__ y, I total) {
  const cuda::Load<T> lx{x};
  CUDA_GRID_LOOP_T(I, i, total) y[i] = cuda::from_f32<T>(depthwise_math::forward_at(s, lx, w, b, i));
}

template <class T, class I>
__global__ void dw_backward_data_kernel(DwShape s, const T* __restrict__ dy, const float* __restrict__ w,
                                        T* __restrict__ dx, I total) {
  const cuda::Load<T> ldy{dy};
  CUDA_GRID_LOOP_T(I, i, total) dx[i] = cuda::from_f32<T>(depthwise_math::backward_data_at(s, ldy, w, i));
}

template <class T, class I>
__global__ void dw_filter_partial_kernel(DwShape s, const T* __restrict__ x, const T* __restrict__ dy, int slots,
                                         int64_t rows_per_chunk, I total, float* __restrict__ partial) {
  const cuda::Load<T> lx{x}, ldy{dy};
  CUDA_GRID_LOOP_T(I, i, total) partial[i] = depthwise_math::filter_partial_at(s, lx, ldy, slots, rows_per_chunk, i);
}

// Slots [0, kh*kw) go to dw (Keras layout: tap * oc + oc'), slot kh*kw (when present) to db.
__global__ void dw_filter_sum_kernel(const float* __restrict__ partial, int64_t chunks, int64_t taps_oc, int64_t oc,
                                     int slots, float* __restrict__ dw, float* __restrict__ db) {
  const int64_t per_chunk = int64_t(slots) * oc;
  CUDA_GRID_LOOP(i, per_chunk) {
    const float v = depthwise_math::filter_sum_at(partial, chunks, per_chunk, i);
    if (i < taps_oc)
      dw[i] = v;
    else
      db[i - taps_oc] = v;
  }
}

class CudaDepthwiseConv2d final : public DepthwiseConv2dKernel {
 public:
  CudaDepthwiseConv2d(OpContext& ctx, const DepthwiseConv2dParams& p)
      : DepthwiseConv2dKernel(ctx, p), c_(cuda_context(ctx)), tiled_(ctx.fast_paths().has(FastPath::DwTiled)) {}

 private:
  void forward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const DwShape s = shape_of(g);
    const int64_t total = y.numel();
    if (total == 0) return;
    if (tiled_ && cuda::dw_tiled_forward(c_, s, x, w.f32(), p_.bias ? b.f32() : nullptr, y)) return;
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      cuda::with_index_type({x.numel(), total}, [&](auto index) {
        using I = decltype(index);
        TRAINER_LAUNCH((dw_forward_kernel<T, I>), cuda::grid_for(total, c_), cuda::kBlock, c_.stream(), s,
                       cuda::ptr<const T>(x), w.f32(), p_.bias ? b.f32() : nullptr, cuda::ptr<T>(y), I(total));
      });
    });
  }

  void backward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) override {
    const DwShape s = shape_of(g);
    const int64_t rows = s.n * s.oh * s.ow;
    if (rows == 0 || s.oc == 0) {  // no output: every gradient is zero
      c_.fill_zero(dw.data(), dw.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      if (dx.defined()) c_.fill_zero(dx.data(), dx.bytes());
      return;
    }
    float* db_ptr = p_.bias ? db.f32() : nullptr;
    if (dx.defined() && !(tiled_ && cuda::dw_tiled_backward_data(c_, s, dy, w.f32(), dx))) backward_data(s, dy, w, dx);
    if (tiled_ && cuda::dw_tiled_takes(s, p_.bias)) {
      cuda::dw_tiled_filter(c_, s, x, dy, partial_, dw.f32(), db_ptr);
      return;
    }
    const int taps = p_.kh * p_.kw, slots = taps + (p_.bias ? 1 : 0);
    int64_t chunks = 0, rows_per_chunk = 0;
    depthwise_math::filter_chunks(rows, chunks, rows_per_chunk);
    const int64_t per_chunk = int64_t(slots) * s.oc;
    float* partial = partial_.as<float>(c_, size_t(chunks * per_chunk));  // grown once per shape
    const int64_t parts = chunks * per_chunk;
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      cuda::with_index_type({x.numel(), dy.numel(), parts}, [&](auto index) {
        using I = decltype(index);
        TRAINER_LAUNCH((dw_filter_partial_kernel<T, I>), cuda::grid_for(parts, c_), cuda::kBlock, c_.stream(), s,
                       cuda::ptr<const T>(x), cuda::ptr<const T>(dy), slots, rows_per_chunk, I(parts), partial);
      });
    });
    TRAINER_LAUNCH(dw_filter_sum_kernel, cuda::grid_for(per_chunk, c_), cuda::kBlock, c_.stream(), partial,
                   chunks, int64_t(taps) * s.oc, s.oc, slots, dw.f32(), db_ptr);
  }

  // dx by the general kernel.
  void backward_data(const DwShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) {
    cuda::dispatch_float(kOp, "dy", dy, [&](auto tag) {
      using T = decltype(tag);
      cuda::with_index_type({dx.numel(), dy.numel()}, [&](auto index) {
        using I = decltype(index);
        TRAINER_LAUNCH((dw_backward_data_kernel<T, I>), cuda::grid_for(dx.numel(), c_), cuda::kBlock, c_.stream(), s,
                       cuda::ptr<const T>(dy), w.f32(), cuda::ptr<T>(dx), I(dx.numel()));
      });
    });
  }

  DwShape shape_of(const ConvGeometry& g) const {
    return {g.n,  g.ih,  g.iw,  g.ic,  g.oh,  g.ow,  g.oc,  p_.multiplier, p_.kh,
            p_.kw, p_.sh, p_.sw, p_.dh, p_.dw, g.pt, g.pl};
  }

  CudaContext& c_;
  const bool tiled_;  // the dw_tiled fast path
  Scratch partial_;  // the filter gradient's per-chunk partials
};

static RegisterKernel<DepthwiseConv2dKernel, CudaDepthwiseConv2d> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
