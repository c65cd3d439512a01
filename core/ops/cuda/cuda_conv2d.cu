// CUDA conv2d: cuDNN convolution on NHWC in f32, bf16 or f16, KRSC filters transposed from HWIO, explicit padding for Keras' odd 'same'.
#include <algorithm>
#include <climits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/ops/conv2d.h"
#include "core/ops/cuda/cuda_bias.cuh"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_conv_algo.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/cuda/cuda_path_counts.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/dense.h"
#include "core/ops/math/pad_math.h"

// cuDNN's legacy convolution API (cudnn_cnn.h; cuDNN 9 API reference, cudnn_cnn library):
//  - x, y: cudnnSetTensor4dDescriptor(CUDNN_TENSOR_NHWC, T, N, C, H, W) (dims always N,C,H,W; the
//    format gives the memory order). Filters: cudnnSetFilter4dDescriptor(T, CUDNN_TENSOR_NHWC,
//    K=filters, C=in channels, R=kh, S=kw), memory K,R,S,C. Our HWIO weights [kh, kw, cin, cout]
//    are the row-major matrix [kh*kw*cin, cout] and KRSC is its transpose [cout, kh*kw*cin], so
//    the f32 weights are transposed (and rounded to T) into a buffer before each use and dW is
//    transposed back (and widened to f32).
//  - T is the activations' type: f32, or bf16 / f16 under mixed precision, with the convolution's
//    compute type float (cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations: tensor cores, fp32
//    accumulation). dW comes out of cuDNN in T, as the gradient of PyTorch autocast's T copy of the
//    weights does, and is widened to f32.
//  - CUDNN_CROSS_CORRELATION (no kernel flip), as Keras/TF and the float64 reference.
//  - Padding: cuDNN pads symmetrically. Each axis's pads (before, after) are split
//    (pad_math::split_symmetric) into the same pad on both sides, which cuDNN takes, and the rest as
//    explicit zero rows and columns in a padded copy of the input (backward data computes the padded
//    gradient and crops it): Keras' 'same' pads total = pb + pt with pt = total / 2, so its rest is
//    0 or 1 zero after; conv1d's causal padding, (k - 1)·dilation before the steps and none after,
//    is all rest, before. cuDNN's output size equals Keras' and is checked for every shape.
//  - Algorithms: once per input shape and type (cuda_conv_algo.h: deterministic, the fastest
//    heuristic candidate whose workspace fits the context's budget).
//  - Math: fp32 uses CUDNN_FMA_MATH, or TF32 tensor cores when the context allows them
//    (devices.tf32, as PyTorch's cudnn.allow_tf32); bf16/f16 use tensor cores.
//  - Bias: a broadcast-add kernel after the convolution; its gradient is a deterministic column
//    sum of dy (cuda_reduce.cuh; cublasSgemv refused 1-row shapes with "an unsupported value or
//    parameter" on the first GPU run, and takes f32 only).
// The fast path conv_1x1_gemm (off by default until measured on a GPU) runs a 1x1 convolution at
// stride 1 on bf16/f16 activations as what it is, a dense layer over the channels: HWIO weights
// [1, 1, C, K] are dense's [C, K], so the dense kernel's cuBLAS GEMMs (cuda_dense.cu: tensor cores,
// f32 accumulation, the weights rounded once into a copy) take x [N, H, W, C] as N·H·W rows with no
// weight transposes, and dw comes out in f32 (cuDNN's comes out in the low type, then widened).
// The bf16 1x1 convolutions were MobileNetV2's largest layer type on the GPU (H200, 2026-11-27:
// 26 ms of a 64-image step, timed layer by layer). fp32 stays with cuDNN, whose TF32 the dense
// layer's strict-fp32 sgemm would not match.

namespace trainer {
namespace {

constexpr const char* kOp = "conv2d";

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// out [cols, rows] = transpose of in [rows, cols] (both row-major), converted from In to Out, in
// 32x32 tiles through shared memory; a 1-D grid strides over the tiles. blockDim.x must be a
// multiple of 32.
template <class In, class Out>
__global__ void transpose_kernel(const In* __restrict__ in, Out* __restrict__ out, int64_t rows, int64_t cols) {
  __shared__ float tile[32][33];
  const int tx = int(threadIdx.x & 31u), ty = int(threadIdx.x >> 5), ny = int(blockDim.x >> 5);
  const int64_t tiles_c = (cols + 31) / 32, tiles = ((rows + 31) / 32) * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {  // uniform per block: the barriers are safe
    const int64_t r0 = (t / tiles_c) * 32, c0 = (t % tiles_c) * 32;
    for (int j = ty; j < 32; j += ny)
      if (r0 + j < rows && c0 + tx < cols) tile[j][tx] = cuda::to_f32(in[(r0 + j) * cols + c0 + tx]);
    __syncthreads();
    for (int j = ty; j < 32; j += ny)
      if (c0 + j < cols && r0 + tx < rows) out[(c0 + j) * rows + r0 + tx] = cuda::from_f32<Out>(tile[tx][j]);
    __syncthreads();
  }
}

// xp [n, hp, wp, c] = x [n, h, w, c] at rows top.. and columns left.., zeros around it (pad2d's
// index math, pad_math.h).
template <class T, class I>
__global__ void pad_kernel(const T* __restrict__ x, T* __restrict__ xp, int64_t n, int h, int w, int hp, int wp,
                           int c, int top, int left) {
  const pad_math::PadShape s{n, h, w, c, hp, wp, top, left};
  CUDA_GRID_LOOP_T(I, i, n * hp * wp * c) {
    const I src = pad_math::forward_source(s, i);
    xp[i] = src >= 0 ? x[src] : cuda::from_f32<T>(0.0f);
  }
}

// dx [n, h, w, c] = the h x w part of dxp [n, hp, wp, c] at rows top.. and columns left...
template <class T, class I>
__global__ void crop_kernel(const T* __restrict__ dxp, T* __restrict__ dx, int64_t n, int h, int w, int hp, int wp,
                            int c, int top, int left) {
  const pad_math::PadShape s{n, h, w, c, hp, wp, top, left};
  CUDA_GRID_LOOP_T(I, i, n * h * w * c) dx[i] = dxp[pad_math::backward_source(s, i)];
}

using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// Everything one input shape and type needs. x describes the (explicitly padded) input seen by cuDNN.
struct ConvPlan {
  ConvGeometry g{};
  DType type = DType::F32;
  pad_math::PadSplit rows{}, cols{};  // cuDNN's pad, and the explicit zero rows and columns around x
  TensorDesc x, y;
  FilterDesc w;
  // One convolution descriptor per pass (forward, backward data, backward filter), each keeping the
  // math type of its pass's algorithm, set once when the algorithm is chosen: one descriptor whose
  // math type changed before every call (each pass may choose another) is what the launched bf16
  // step's host time points at (H100, 2026-11-27: MiniGoogLeNet 14.5 ms launched vs 2.5 recorded,
  // fp32 5.4 vs 3.4; MobileNetV2's bf16 1x1 convolutions ~0.3 ms each, timed with the host's part).
  ConvDesc conv[3];
  std::optional<ConvAlgo> fwd, bwd_data, bwd_filter;
  bool padded() const { return rows.before + rows.after + cols.before + cols.after > 0; }
  int hp() const { return int(g.ih) + rows.before + rows.after; }
  int wp() const { return int(g.iw) + cols.before + cols.after; }
  ConvDescs descs(ConvPass p) const { return {x.d, y.d, w.d, conv[int(p)].d}; }
  std::string what() const {
    return cuda::cat(g.n, "x", g.ih, "x", g.iw, "x", g.ic, " -> ", g.n, "x", g.oh, "x", g.ow, "x", g.oc, " ",
                     dtype_name(type));
  }
};

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuDNN's 32-bit sizes");
  return int(v);
}

class CudaConv2d final : public Conv2dKernel {
 public:
  CudaConv2d(OpContext& ctx, const Conv2dParams& p) : Conv2dKernel(ctx, p), c_(cuda_context(ctx)) {
    if (ctx.fast_paths().has(FastPath::Conv1x1Gemm) && p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 &&
        low_dtype(ctx.precision()) != DType::F32) {
      DenseParams d;
      d.units = p.filters;
      d.bias = p.bias;
      gemm_ = make_kernel<DenseKernel>(ctx, d);
    }
  }

 private:
  void forward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    if (g.n == 0 || g.oh == 0 || g.ow == 0) return;
    if (by_gemm(x, y)) {
      gemm_->forward(x, w.reshape({g.ic, g.oc}), b, y);
      cuda::count_path(cuda::PathCount::Conv1x1Gemm);
      return;
    }
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) { forward_t<decltype(tag)>(x, w, b, y, g); });
  }

  void backward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) override {
    if (g.n == 0 || g.oh == 0 || g.ow == 0) {  // no output: every gradient is zero
      if (dw.defined()) c_.fill_zero(dw.data(), dw.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      if (dx.defined()) c_.fill_zero(dx.data(), dx.bytes());
      return;
    }
    if (by_gemm(x, dy) && dw.defined() && (!dx.defined() || dx.contiguous())) {
      Tensor dw2 = dw.reshape({g.ic, g.oc});
      gemm_->backward(x, w.reshape({g.ic, g.oc}), dy, dx, dw2, db);
      cuda::count_path(cuda::PathCount::Conv1x1Gemm);
      return;
    }
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) { backward_t<decltype(tag)>(x, w, dy, dx, dw, db, g); });
  }

  template <class T>
  void forward_t(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ConvGeometry& g) {
    ConvPlan& pl = plan(x, g);
    if (!pl.fwd) pl.fwd = choose_conv_algo(c_, pl.descs(ConvPass::Forward), ConvPass::Forward, pl.type, pl.what());
    const T* xin = padded_input<T>(pl, x);
    const T* wk = to_krsc<T>(w);
    void* ws = pl.fwd->workspace ? c_.workspace(pl.fwd->workspace) : nullptr;
    const float one = 1.0f, zero = 0.0f;  // float scaling factors: the compute type is float
    CUDNN_CHECK(cudnnConvolutionForward(c_.cudnn(), &one, pl.x.d, xin, pl.w.d, wk, pl.conv[int(ConvPass::Forward)].d,
                                        cudnnConvolutionFwdAlgo_t(pl.fwd->algo), ws, pl.fwd->workspace, &zero, pl.y.d,
                                        y.data()));
    if (p_.bias)
      TRAINER_LAUNCH(cuda::add_bias_kernel<T>, cuda::grid_for(y.numel(), c_), cuda::kBlock, c_.stream(), cuda::ptr<T>(y),
                     b.f32(), y.numel(), g.oc);
  }

  template <class T>
  void backward_t(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                  const ConvGeometry& g) {
    ConvPlan& pl = plan(x, g);
    if (dx.defined() && !pl.bwd_data)
      pl.bwd_data = choose_conv_algo(c_, pl.descs(ConvPass::BackwardData), ConvPass::BackwardData, pl.type, pl.what());
    if (dw.defined() && !pl.bwd_filter)
      pl.bwd_filter =
          choose_conv_algo(c_, pl.descs(ConvPass::BackwardFilter), ConvPass::BackwardFilter, pl.type, pl.what());
    // One workspace request for both calls: a later, larger request could move it.
    const size_t wsb =
        std::max(dx.defined() ? pl.bwd_data->workspace : 0, dw.defined() ? pl.bwd_filter->workspace : 0);
    void* ws = wsb ? c_.workspace(wsb) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = c_.cudnn();

    if (dx.defined()) {
      const T* wk = to_krsc<T>(w);
      T* dxo = pl.padded() ? dxpad_.as<T>(c_, size_t(g.n) * pl.hp() * pl.wp() * g.ic) : cuda::ptr<T>(dx);
      CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, pl.w.d, wk, pl.y.d, dy.data(),
                                               pl.conv[int(ConvPass::BackwardData)].d,
                                               cudnnConvolutionBwdDataAlgo_t(pl.bwd_data->algo), ws,
                                               pl.bwd_data->workspace, &zero, pl.x.d, dxo));
      if (pl.padded())
        cuda::with_index_type({int64_t(g.n) * pl.hp() * pl.wp() * g.ic}, [&](auto index) {
          TRAINER_LAUNCH((crop_kernel<T, decltype(index)>), cuda::grid_for(dx.numel(), c_), cuda::kBlock, c_.stream(),
                         dxo, cuda::ptr<T>(dx), g.n, int(g.ih), int(g.iw), pl.hp(), pl.wp(), int(g.ic), pl.rows.before,
                         pl.cols.before);
        });
    }

    if (!dw.defined()) return;  // the input gradient alone (backward_data: x is dx, not read)
    const T* xin = padded_input<T>(pl, x);
    T* dwk = dw_krsc_.as<T>(c_, size_t(w.numel()));
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, pl.x.d, xin, pl.y.d, dy.data(),
                                               pl.conv[int(ConvPass::BackwardFilter)].d,
                                               cudnnConvolutionBwdFilterAlgo_t(pl.bwd_filter->algo), ws,
                                               pl.bwd_filter->workspace, &zero, pl.w.d, dwk));
    transpose<T, float>(dwk, dw.f32(), g.oc, int64_t(p_.kh) * p_.kw * g.ic);  // KRSC -> HWIO, widened

    if (p_.bias) cuda::column_sums(bias_sums_, c_, cuda::ptr<const T>(dy), g.n * g.oh * g.ow, g.oc, db.f32());
  }

  // Whether the conv_1x1_gemm path takes this call: the path made for this layer (1x1, stride 1, a
  // low-precision context) and activations of the context's low type, stored densely.
  bool by_gemm(const Tensor& x, const Tensor& y) const {
    return gemm_ && x.dtype() == low_dtype(c_.precision()) && x.contiguous() && y.contiguous();
  }

  ConvPlan& plan(const Tensor& x, const ConvGeometry& g) {
    for (auto& e : plans_)
      if (e.first == x.shape().dims() && e.second->type == x.dtype()) return *e.second;
    if (plans_.size() >= kMaxPlans) plans_.erase(plans_.begin());  // shapes change rarely (see kMaxPlans)
    plans_.emplace_back(x.shape().dims(), make_plan(g, x.dtype()));
    return *plans_.back().second;
  }

  std::unique_ptr<ConvPlan> make_plan(const ConvGeometry& g, DType type) {
    auto pl = std::make_unique<ConvPlan>();
    pl->g = g;
    pl->type = type;
    pl->rows = pad_math::split_symmetric(g.pt, g.pb);
    pl->cols = pad_math::split_symmetric(g.pl, g.pr);
    if (g.pt < 0 || g.pb < 0 || g.pl < 0 || g.pr < 0)  // window_1d never pads so (internal error)
      cuda::fail(kOp, ": unexpected padding ", g.pt, "/", g.pb, " x ", g.pl, "/", g.pr);
    // Capability: cuDNN's legacy API takes int sizes.
    const int N = to_int(g.n, "batch"), IC = to_int(g.ic, "input channels"), OC = to_int(g.oc, "filters");
    const int HP = to_int(g.ih + pl->rows.before + pl->rows.after, "input height"),
              WP = to_int(g.iw + pl->cols.before + pl->cols.after, "input width");
    const int OH = to_int(g.oh, "output height"), OW = to_int(g.ow, "output width");
    // cuDNN's legacy tensors index with 32 bits: every tensor must have fewer than 2^31 elements.
    to_int(g.n * HP * WP * g.ic, "input elements");
    to_int(g.n * g.oh * g.ow * g.oc, "output elements");
    to_int(g.oc * p_.kh * p_.kw * g.ic, "weight elements");
    const cudnnDataType_t dt = cudnn_type(type);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->x.d, CUDNN_TENSOR_NHWC, dt, N, IC, HP, WP));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->y.d, CUDNN_TENSOR_NHWC, dt, N, OC, OH, OW));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(pl->w.d, dt, CUDNN_TENSOR_NHWC, OC, IC, p_.kh, p_.kw));
    for (ConvDesc& cd : pl->conv) {
      CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd.d, pl->rows.both, pl->cols.both, p_.sh, p_.sw, p_.dh, p_.dw,
                                                  CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
      CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, conv_math(type, c_.tf32())));
    }
    int on = 0, oc = 0, oh = 0, ow = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(pl->conv[0].d, pl->x.d, pl->w.d, &on, &oc, &oh, &ow));
    if (on != N || oc != OC || oh != OH || ow != OW)
      cuda::fail(kOp, ": cuDNN's output ", on, "x", oh, "x", ow, "x", oc, " differs from Keras' ", N, "x", OH, "x", OW,
                 "x", OC, " (internal error)");
    return pl;
  }

  // x as cuDNN sees it: x itself, or a copy with the explicit zero padding in xpad_.
  template <class T>
  const T* padded_input(const ConvPlan& pl, const Tensor& x) {
    if (!pl.padded()) return cuda::ptr<const T>(x);
    const ConvGeometry& g = pl.g;
    const int64_t total = g.n * pl.hp() * pl.wp() * g.ic;
    T* xp = xpad_.as<T>(c_, size_t(total));
    cuda::with_index_type({total}, [&](auto index) {
      TRAINER_LAUNCH((pad_kernel<T, decltype(index)>), cuda::grid_for(total, c_), cuda::kBlock, c_.stream(),
                     cuda::ptr<const T>(x), xp, g.n, int(g.ih), int(g.iw), pl.hp(), pl.wp(), int(g.ic), pl.rows.before,
                     pl.cols.before);
    });
    return xp;
  }

  // out [cols, rows] = in [rows, cols]ᵀ on the context's stream.
  template <class In, class Out>
  void transpose(const In* in, Out* out, int64_t rows, int64_t cols) {
    const int64_t tiles = ((rows + 31) / 32) * ((cols + 31) / 32);
    TRAINER_LAUNCH((transpose_kernel<In, Out>), cuda::grid_for(tiles * cuda::kBlock, c_), cuda::kBlock, c_.stream(),
                   in, out, rows, cols);
  }

  // HWIO w, i.e. [kh*kw*cin, cout], transposed into the KRSC buffer [cout, kh*kw*cin] of type T.
  template <class T>
  const T* to_krsc(const Tensor& w) {
    T* out = w_krsc_.as<T>(c_, size_t(w.numel()));
    const int64_t k = p_.filters;
    transpose<float, T>(w.f32(), out, w.numel() / k, k);
    return out;
  }

  // Plans are descriptors and choices (no memory): enough for every shape a layer sees in a run
  // (training, a short last batch, evaluation's, micro-batches), so that no plan is made again —
  // its algorithm chosen, its workspace grown — inside a step being recorded, where that fails
  // the recording and the step runs launched from then on.
  static constexpr size_t kMaxPlans = 64;
  CudaContext& c_;
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<ConvPlan>>> plans_;
  // Scratch, grown to the largest shape seen: the weights and their gradient in KRSC, of the
  // activations' type; the explicitly padded input and its gradient (odd 'same' padding only).
  Scratch w_krsc_, dw_krsc_, xpad_, dxpad_;
  cuda::ColumnReducer bias_sums_;
  std::unique_ptr<DenseKernel> gemm_;  // the conv_1x1_gemm path, where it applies
};

static RegisterKernel<Conv2dKernel, CudaConv2d> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
