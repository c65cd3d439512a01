// CUDA conv2d: cuDNN convolution on NHWC, KRSC filters transposed from HWIO, explicit padding for Keras' odd 'same'.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/ops/conv2d.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"

// cuDNN's legacy convolution API (cudnn_cnn.h; cuDNN 9 API reference, cudnn_cnn library):
//  - x, y: cudnnSetTensor4dDescriptor(CUDNN_TENSOR_NHWC, float, N, C, H, W) (dims always N,C,H,W;
//    the format gives the memory order). Filters: cudnnSetFilter4dDescriptor(float,
//    CUDNN_TENSOR_NHWC, K=filters, C=in channels, R=kh, S=kw), memory K,R,S,C. Our HWIO weights
//    [kh, kw, cin, cout] are the row-major matrix [kh*kw*cin, cout] and KRSC is its transpose
//    [cout, kh*kw*cin], so the weights are transposed into a cached buffer before each use and dW
//    is transposed back.
//  - CUDNN_CROSS_CORRELATION (no kernel flip), as Keras/TF and the float64 reference.
//  - Padding: cuDNN pads symmetrically. Keras' 'same' pads total = pb + pt with pt = total / 2, so
//    pb - pt is 0 or 1 per dimension. cuDNN gets the symmetric pad (pt, pl) and the input gets the
//    remaining pb - pt zero rows at the bottom and pr - pl zero columns at the right explicitly
//    (a padded copy; backward data computes the padded gradient and crops it). cuDNN's output
//    size 1 + (H + (pb - pt) + 2 pt - eff) / s equals Keras' and is checked for every shape.
//  - Algorithms: cudnnGet*Algorithm_v7 heuristics (no timing runs, so the choice is the same
//    every run), once per input shape; the first candidate that is deterministic
//    (perf.determinism == CUDNN_DETERMINISTIC; BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0 / _3 use
//    atomics and are not: cudnn_ops.h, cuDNN docs on reproducibility), has the requested math type and a workspace
//    within CudaContext::kMaxWorkspace. Fallbacks: FWD IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1,
//    BWD_FILTER_ALGO_1 (deterministic; PyTorch's choices in deterministic mode).
//  - Math: fp32 uses CUDNN_FMA_MATH. CUDNN_DEFAULT_MATH would permit TF32 tensor cores on Ampere
//    and later (cudnnMathType_t docs), which is not fp32 accuracy. conv_math() is the hook for
//    bf16/fp16 (CUDNN_TENSOR_OP_MATH) or an opt-in TF32 mode.
//  - Bias: a broadcast-add kernel after the convolution (cudnnAddTensor on NHWC was reported far
//    slower than on NCHW, NVIDIA forum, cuDNN 7); its gradient is dyᵀ·1 by cublasSgemv
//    (deterministic, no atomics).

namespace trainer {
namespace {

constexpr const char* kOp = "conv2d";

cudnnMathType_t conv_math(DType t) { return t == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

// out [cols, rows] = transpose of in [rows, cols] (both row-major), in 32x32 tiles through shared
// memory; a 1-D grid strides over the tiles. blockDim.x must be a multiple of 32.
__global__ void transpose_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t rows, int64_t cols) {
  __shared__ float tile[32][33];
  const int tx = int(threadIdx.x & 31u), ty = int(threadIdx.x >> 5), ny = int(blockDim.x >> 5);
  const int64_t tiles_c = (cols + 31) / 32, tiles = ((rows + 31) / 32) * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {  // uniform per block: the barriers are safe
    const int64_t r0 = (t / tiles_c) * 32, c0 = (t % tiles_c) * 32;
    for (int j = ty; j < 32; j += ny)
      if (r0 + j < rows && c0 + tx < cols) tile[j][tx] = in[(r0 + j) * cols + c0 + tx];
    __syncthreads();
    for (int j = ty; j < 32; j += ny)
      if (c0 + j < cols && r0 + tx < rows) out[(c0 + j) * rows + r0 + tx] = tile[tx][j];
    __syncthreads();
  }
}

// xp [n, hp, wp, c] = x [n, h, w, c] with zero rows h..hp-1 and zero columns w..wp-1.
__global__ void pad_kernel(const float* __restrict__ x, float* __restrict__ xp, int64_t n, int h, int w, int hp, int wp,
                           int c) {
  CUDA_GRID_LOOP(i, n * hp * wp * c) {
    const int ch = int(i % c);
    int64_t r = i / c;
    const int xx = int(r % wp);
    r /= wp;
    const int yy = int(r % hp);
    const int64_t b = r / hp;
    xp[i] = (yy < h && xx < w) ? x[((b * h + yy) * w + xx) * c + ch] : 0.0f;
  }
}

// dx [n, h, w, c] = the top-left h x w part of dxp [n, hp, wp, c].
__global__ void crop_kernel(const float* __restrict__ dxp, float* __restrict__ dx, int64_t n, int h, int w, int hp,
                            int wp, int c) {
  CUDA_GRID_LOOP(i, n * h * w * c) {
    const int ch = int(i % c);
    int64_t r = i / c;
    const int xx = int(r % w);
    r /= w;
    const int yy = int(r % h);
    const int64_t b = r / h;
    dx[i] = dxp[((b * hp + yy) * wp + xx) * c + ch];
  }
}

__global__ void fill_kernel(float* __restrict__ p, int64_t n, float v) { CUDA_GRID_LOOP(i, n) p[i] = v; }

// y [rows, c] += b [c] (broadcast over the rows).
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t total, int64_t c) {
  CUDA_GRID_LOOP(i, total) y[i] += b[i % c];
}

using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

struct Algo {
  bool chosen = false;
  int algo = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;
  bool heuristic = false;  // false: the fallback algorithm
};

// Everything one input shape needs. x describes the (explicitly padded) input seen by cuDNN.
struct ConvPlan {
  ConvGeometry g{};
  int eh = 0, ew = 0;  // explicit zero rows (bottom) and columns (right)
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Algo fwd, bwd_data, bwd_filter;
  bool padded() const { return eh > 0 || ew > 0; }
  int hp() const { return int(g.ih) + eh; }
  int wp() const { return int(g.iw) + ew; }
};

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuDNN's 32-bit sizes");
  return int(v);
}

// The first usable heuristic candidate (see the top of the file), else `fallback`. `ws_of(algo,
// &bytes)` queries the workspace of an algorithm with the descriptor's current math type.
template <class Perf, class WsOf>
Algo choose(const std::vector<Perf>& perf, int count, cudnnConvolutionDescriptor_t conv, cudnnMathType_t math,
            int fallback, const char* what, WsOf&& ws_of) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[size_t(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC || p.mathType != math ||
        p.memory > CudaContext::kMaxWorkspace)
      continue;
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, p.mathType));
    size_t ws = 0;
    if (ws_of(int(p.algo), &ws) != CUDNN_STATUS_SUCCESS || ws > CudaContext::kMaxWorkspace) continue;
    return {true, int(p.algo), p.mathType, std::max(ws, p.memory), true};
  }
  CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
  size_t ws = 0;
  cudnnStatus_t s = ws_of(fallback, &ws);
  if (s != CUDNN_STATUS_SUCCESS)
    cuda_fail(cuda::cat("conv2d: no deterministic cuDNN algorithm for ", what).c_str(), cudnnGetErrorString(s),
              __FILE__, __LINE__);
  return {true, fallback, math, ws, false};
}

// TRAINER_CUDNN_LOG=1 prints every algorithm choice to stderr (for the first GPU runs and benchmarks).
void log_choice(const ConvGeometry& g, const char* what, const Algo& a) {
  static const bool on = [] {
    const char* e = std::getenv("TRAINER_CUDNN_LOG");
    return e && *e && *e != '0';
  }();
  if (on)
    std::cerr << cuda::cat("conv2d x ", g.n, "x", g.ih, "x", g.iw, "x", g.ic, " -> ", g.oh, "x", g.ow, "x", g.oc, ": ",
                           what, " algo ", a.algo, " math ", int(a.math), " workspace ", a.workspace, " bytes (",
                           a.heuristic ? "heuristic" : "fallback", ")\n");
}

class CudaConv2d final : public Conv2dKernel {
 public:
  CudaConv2d(OpContext& ctx, const Conv2dParams& p) : c_(cuda_context(ctx)), p_(p), math_(conv_math(DType::F32)) {
    if (p.filters <= 0) cuda::fail(kOp, ": filters must be positive, got ", p.filters);
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1)
      cuda::fail(kOp, ": kernel ", p.kh, "x", p.kw, ", strides ", p.sh, "x", p.sw, " and dilation ", p.dh, "x", p.dw,
                 " must be positive");
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ConvGeometry g = check(x, w, b, p_.bias);
    cuda::require_shape(kOp, "y", y, {g.n, g.oh, g.ow, g.oc}, dev());
    if (g.n == 0 || g.oh == 0 || g.ow == 0) return;
    ConvPlan& pl = plan(x.shape(), g);
    std::optional<cuda::DeviceBuffer> xpad;
    const float* xin = padded_input(pl, x, xpad);
    const float* wk = to_krsc(w);
    void* ws = pl.fwd.workspace ? c_.workspace(pl.fwd.workspace) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv.d, pl.fwd.math));
    CUDNN_CHECK(cudnnConvolutionForward(c_.cudnn(), &one, pl.x.d, xin, pl.w.d, wk, pl.conv.d,
                                        cudnnConvolutionFwdAlgo_t(pl.fwd.algo), ws, pl.fwd.workspace, &zero, pl.y.d,
                                        y.data()));
    if (p_.bias)
      TRAINER_LAUNCH(add_bias_kernel, cuda::grid_for(y.numel(), c_), cuda::kBlock, c_.stream(), y.f32(), b.f32(),
                     y.numel(), g.oc);
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) override {
    ConvGeometry g = check(x, w, Tensor(), false);
    cuda::require_shape(kOp, "dy", dy, {g.n, g.oh, g.ow, g.oc}, dev());
    cuda::require_shape(kOp, "dw", dw, w.shape(), dev());
    if (p_.bias) cuda::require_shape(kOp, "db", db, {g.oc}, dev());
    if (dx.defined()) cuda::require_shape(kOp, "dx", dx, x.shape(), dev());
    if (g.n == 0 || g.oh == 0 || g.ow == 0) {  // no output: every gradient is zero
      c_.fill_zero(dw.data(), dw.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      if (dx.defined()) c_.fill_zero(dx.data(), dx.bytes());
      return;
    }
    ConvPlan& pl = plan(x.shape(), g);
    if (dx.defined() && !pl.bwd_data.chosen) choose_bwd_data(pl);
    if (!pl.bwd_filter.chosen) choose_bwd_filter(pl);
    // One workspace request for both calls: a later, larger request could move it.
    const size_t wsb = std::max(dx.defined() ? pl.bwd_data.workspace : 0, pl.bwd_filter.workspace);
    void* ws = wsb ? c_.workspace(wsb) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = c_.cudnn();

    if (dx.defined()) {
      const float* wk = to_krsc(w);
      std::optional<cuda::DeviceBuffer> dxpad;
      float* dxo = dx.f32();
      if (pl.padded()) {
        dxpad.emplace(c_.allocator(), size_t(g.n) * pl.hp() * pl.wp() * g.ic * sizeof(float));
        dxo = dxpad->as<float>();
      }
      CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv.d, pl.bwd_data.math));
      CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, pl.w.d, wk, pl.y.d, dy.data(), pl.conv.d,
                                               cudnnConvolutionBwdDataAlgo_t(pl.bwd_data.algo), ws,
                                               pl.bwd_data.workspace, &zero, pl.x.d, dxo));
      if (pl.padded())
        TRAINER_LAUNCH(crop_kernel, cuda::grid_for(dx.numel(), c_), cuda::kBlock, c_.stream(), dxo, dx.f32(), g.n,
                       int(g.ih), int(g.iw), pl.hp(), pl.wp(), int(g.ic));
    }

    std::optional<cuda::DeviceBuffer> xpad;
    const float* xin = padded_input(pl, x, xpad);
    if (dw_krsc_.numel() != w.numel()) dw_krsc_ = c_.empty({w.numel()});
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv.d, pl.bwd_filter.math));
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, pl.x.d, xin, pl.y.d, dy.data(), pl.conv.d,
                                               cudnnConvolutionBwdFilterAlgo_t(pl.bwd_filter.algo), ws,
                                               pl.bwd_filter.workspace, &zero, pl.w.d, dw_krsc_.data()));
    transpose(dw_krsc_.f32(), dw.f32(), g.oc, int64_t(p_.kh) * p_.kw * g.ic);  // KRSC -> HWIO

    if (p_.bias) {  // db [oc] = Σ over the n*oh*ow rows of dy [rows, oc] (column-major: oc x rows)
      const int64_t rows = g.n * g.oh * g.ow;
      const float* ones = ones_of(rows);
      CUBLAS_CHECK(cublasSgemv(c_.cublas(), CUBLAS_OP_N, int(g.oc), int(rows), &one, dy.f32(), int(g.oc), ones, 1,
                               &zero, db.f32(), 1));
    }
  }

 private:
  Device dev() const { return c_.device(); }

  ConvGeometry check(const Tensor& x, const Tensor& w, const Tensor& b, bool need_bias) const {
    cuda::require_rank(kOp, "x", x, 4, dev());
    ConvGeometry g = conv2d_geometry(x.shape(), p_);
    cuda::require_shape(kOp, "w", w, conv2d_weight_shape(g.ic, p_), dev());
    if (need_bias) cuda::require_shape(kOp, "b", b, {g.oc}, dev());
    return g;
  }

  ConvPlan& plan(const Shape& xs, const ConvGeometry& g) {
    for (auto& e : plans_)
      if (e.first == xs.dims()) return *e.second;
    if (plans_.size() >= kMaxPlans) plans_.erase(plans_.begin());  // the batch size changes rarely
    plans_.emplace_back(xs.dims(), make_plan(g));
    return *plans_.back().second;
  }

  std::unique_ptr<ConvPlan> make_plan(const ConvGeometry& g) {
    auto pl = std::make_unique<ConvPlan>();
    pl->g = g;
    pl->eh = g.pb - g.pt;
    pl->ew = g.pr - g.pl;
    if (pl->eh < 0 || pl->ew < 0 || pl->eh > 1 || pl->ew > 1)
      cuda::fail(kOp, ": unexpected padding ", g.pt, "/", g.pb, " x ", g.pl, "/", g.pr);
    if (g.ic == 0) cuda::fail(kOp, ": x has no channels");
    const int N = to_int(g.n, "batch"), IC = to_int(g.ic, "input channels"), OC = to_int(g.oc, "filters");
    const int HP = to_int(g.ih + pl->eh, "input height"), WP = to_int(g.iw + pl->ew, "input width");
    const int OH = to_int(g.oh, "output height"), OW = to_int(g.ow, "output width");
    // cuDNN's legacy tensors index with 32 bits: every tensor must have fewer than 2^31 elements.
    to_int(g.n * HP * WP * g.ic, "input elements");
    to_int(g.n * g.oh * g.ow * g.oc, "output elements");
    to_int(g.oc * p_.kh * p_.kw * g.ic, "weight elements");
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->x.d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, IC, HP, WP));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->y.d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, OC, OH, OW));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(pl->w.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, OC, IC, p_.kh, p_.kw));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(pl->conv.d, g.pt, g.pl, p_.sh, p_.sw, p_.dh, p_.dw,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl->conv.d, math_));
    int on = 0, oc = 0, oh = 0, ow = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(pl->conv.d, pl->x.d, pl->w.d, &on, &oc, &oh, &ow));
    if (on != N || oc != OC || oh != OH || ow != OW)
      cuda::fail(kOp, ": cuDNN's output ", on, "x", oh, "x", ow, "x", oc, " differs from Keras' ", N, "x", OH, "x", OW,
                 "x", OC, " (internal error)");
    choose_fwd(*pl);
    return pl;
  }

  void choose_fwd(ConvPlan& pl) {
    cudnnHandle_t h = c_.cudnn();
    int max = 0, got = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(max, 1)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv.d, math_));
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, pl.x.d, pl.w.d, pl.conv.d, pl.y.d, max, &got, perf.data()));
    pl.fwd = choose(perf, got, pl.conv.d, math_, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, "forward",
                    [&](int a, size_t* ws) {
                      return cudnnGetConvolutionForwardWorkspaceSize(h, pl.x.d, pl.w.d, pl.conv.d, pl.y.d,
                                                                     cudnnConvolutionFwdAlgo_t(a), ws);
                    });
    log_choice(pl.g, "forward", pl.fwd);
  }

  void choose_bwd_data(ConvPlan& pl) {
    cudnnHandle_t h = c_.cudnn();
    int max = 0, got = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(max, 1)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv.d, math_));
    CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(h, pl.w.d, pl.y.d, pl.conv.d, pl.x.d, max, &got, perf.data()));
    pl.bwd_data =
        choose(perf, got, pl.conv.d, math_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, "backward data", [&](int a, size_t* ws) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl.w.d, pl.y.d, pl.conv.d, pl.x.d,
                                                              cudnnConvolutionBwdDataAlgo_t(a), ws);
        });
    log_choice(pl.g, "backward data", pl.bwd_data);
  }

  void choose_bwd_filter(ConvPlan& pl) {
    cudnnHandle_t h = c_.cudnn();
    int max = 0, got = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(max, 1)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv.d, math_));
    CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, pl.x.d, pl.y.d, pl.conv.d, pl.w.d, max, &got, perf.data()));
    pl.bwd_filter = choose(perf, got, pl.conv.d, math_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, "backward filter",
                           [&](int a, size_t* ws) {
                             return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                 h, pl.x.d, pl.y.d, pl.conv.d, pl.w.d, cudnnConvolutionBwdFilterAlgo_t(a), ws);
                           });
    log_choice(pl.g, "backward filter", pl.bwd_filter);
  }

  // x as cuDNN sees it: x itself, or a copy with the extra bottom/right zero padding in `buf`.
  const float* padded_input(const ConvPlan& pl, const Tensor& x, std::optional<cuda::DeviceBuffer>& buf) {
    if (!pl.padded()) return x.f32();
    const ConvGeometry& g = pl.g;
    const int64_t total = g.n * pl.hp() * pl.wp() * g.ic;
    buf.emplace(c_.allocator(), size_t(total) * sizeof(float));
    TRAINER_LAUNCH(pad_kernel, cuda::grid_for(total, c_), cuda::kBlock, c_.stream(), x.f32(), buf->as<float>(), g.n,
                   int(g.ih), int(g.iw), pl.hp(), pl.wp(), int(g.ic));
    return buf->as<float>();
  }

  // out [cols, rows] = in [rows, cols]ᵀ on the context's stream.
  void transpose(const float* in, float* out, int64_t rows, int64_t cols) {
    const int64_t tiles = ((rows + 31) / 32) * ((cols + 31) / 32);
    TRAINER_LAUNCH(transpose_kernel, cuda::grid_for(tiles * cuda::kBlock, c_), cuda::kBlock, c_.stream(), in, out, rows,
                   cols);
  }

  // HWIO w, i.e. [kh*kw*cin, cout], transposed into the cached KRSC buffer [cout, kh*kw*cin].
  const float* to_krsc(const Tensor& w) {
    if (w_krsc_.numel() != w.numel()) w_krsc_ = c_.empty({w.numel()});
    const int64_t k = p_.filters;
    transpose(w.f32(), w_krsc_.f32(), w.numel() / k, k);
    return w_krsc_.f32();
  }

  // A device vector of at least n ones (grown on demand).
  const float* ones_of(int64_t n) {
    if (ones_.numel() < n) {
      ones_ = c_.empty({n});
      TRAINER_LAUNCH(fill_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), ones_.f32(), n, 1.0f);
    }
    return ones_.f32();
  }

  static constexpr size_t kMaxPlans = 8;
  CudaContext& c_;
  Conv2dParams p_;
  cudnnMathType_t math_;
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<ConvPlan>>> plans_;
  Tensor w_krsc_, dw_krsc_, ones_;
};

static RegisterKernel<Conv2dKernel, CudaConv2d> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
