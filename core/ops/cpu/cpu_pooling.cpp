// CPU pooling: oneDNN max/avg 2-D pooling on f32/bf16 NHWC (max keeps a workspace per training input); global pooling.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/pool_math.h"
#include "core/ops/pooling.h"

namespace trainer {
namespace {

using dnnl::memory;

// x, y, dy and dx of one call share x's type, f32 or bf16 (mixed precision; the op header checks
// them, f16 is refused here). oneDNN's pooling computes in f32 and rounds when it stores bf16: once
// per output in forward; in backward, where windows overlap, once per window adding its share into
// dx (a few bf16 ulps at most).

// A plan's or workspace's key: the input's shape and type (one kernel may see both types).
std::vector<int64_t> shape_type_key(const Tensor& x) {
  std::vector<int64_t> key = x.shape().dims();
  key.push_back(int64_t(x.dtype()));
  return key;
}

struct PoolPlan {
  Window1d h, w;
  memory::desc src_md, dst_md;
  dnnl::pooling_forward::primitive_desc train_pd, infer_pd;
  dnnl::pooling_forward train, infer;
  bool have_bwd = false;
  dnnl::pooling_backward::primitive_desc bwd_pd;
  dnnl::pooling_backward bwd;
};

class CpuPool2d final : public Pool2dKernel {
 public:
  CpuPool2d(OpContext& ctx, const Pool2dParams& p) : Pool2dKernel(ctx, p), c_(cpu_context(ctx)) {}

 private:
  void forward_impl(const Pool2dGeometry& g, const Tensor& x, Tensor& y, bool training) override {
    cpu::refuse_f16(kName, "x", x);
    if (y.numel() == 0) return;
    PoolPlan& pl = plan(g, x);
    auto& eng = c_.engine();
    bool use_train = training && p_.kind == PoolKind::Max;
    auto& pd = use_train ? pl.train_pd : pl.infer_pd;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, cpu::mem(pl.src_md, eng, x.data())},
                                            {DNNL_ARG_DST, cpu::mem(pl.dst_md, eng, y.data())},
                                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pd, eng)}};
    if (use_train) args[DNNL_ARG_WORKSPACE] = memory(pl.train_pd.workspace_desc(), eng, workspace(pl, x, true)->data());
    (use_train ? pl.train : pl.infer).execute(c_.stream(), args);
    c_.stream().wait();
    if (p_.kind == PoolKind::Max) {
      if (x.dtype() == DType::BF16) propagate_nan<cpu::bf16>(g, x, y);
      else propagate_nan<float>(g, x, y);
    }
  }

  // oneDNN's max pooling passes over a NaN (its comparisons are ordered), so a window holding one
  // gets the largest other value. PyTorch's max_pool2d (and the CUDA kernel, pool_math.h) give
  // NaN: a diverged activation must reach the loss. One read of x finds whether it holds a NaN;
  // only then are the windows with one set to NaN (pool_math's rule). The argmax workspace is
  // oneDNN's: the NaN then sits in the loss and in every gradient, wherever dy is routed.
  template <class T>
  void propagate_nan(const Pool2dGeometry& pg, const Tensor& x, Tensor& y) const {
    const T* xp = x.as<T>();
    const int64_t n = x.numel();
    // x - x is 0 for a finite x, NaN for a NaN or an inf: a sum that vectorises (an inf only costs
    // the pass below, which changes nothing for it).
    float bad = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) bad += cpu::to_f32(xp[i]) - cpu::to_f32(xp[i]);
    if (bad == 0.0f) return;
    if (pg.ih * pg.iw > INT_MAX || pg.n > INT_MAX || pg.c > INT_MAX)
      throw std::invalid_argument("pool2d: a NaN in an input of more than 2^31 positions");
    pool_math::PoolGeom g;
    g.n = int(pg.n), g.ih = int(pg.ih), g.iw = int(pg.iw), g.c = int(pg.c);
    g.oh = int(pg.h.out), g.ow = int(pg.w.out);
    g.kh = p_.kh, g.kw = p_.kw, g.sh = p_.sh, g.sw = p_.sw;
    g.pt = pg.h.pad_before, g.pl = pg.w.pad_before;
    T* yp = y.as<T>();
    const int64_t total = y.numel();
    auto load = [xp](int64_t i) { return cpu::to_f32(xp[i]); };
#pragma omp parallel for schedule(static) if (total > cpu::kParallelGrain)
    for (int64_t i = 0; i < total; ++i) {
      int arg;
      const float m = pool_math::window_max(g, pool_math::output_window(g, i), load, arg);
      if (m != m) yp[i] = cpu::from_f32<T>(m);
    }
  }

  // y is not needed: max pooling uses the workspace of the training forward of x.
  void backward_impl(const Pool2dGeometry& g, const Tensor& x, const Tensor& /*y*/, const Tensor& dy,
                     Tensor& dx) override {
    cpu::refuse_f16(kName, "x", x);
    if (dy.numel() == 0) {
      std::memset(dx.data(), 0, dx.bytes());
      return;
    }
    PoolPlan& pl = plan(g, x);
    auto& eng = c_.engine();
    Tensor* ws = p_.kind == PoolKind::Max ? workspace(pl, x, false) : nullptr;
    if (p_.kind == PoolKind::Max && !ws) {
      // No training forward of this input preceded: recompute the argmax positions (the maxima
      // themselves go to scratch kept for the next such call).
      ws = workspace(pl, x, true);
      void* maxima = discard_.get(c_, dy.bytes());
      pl.train.execute(c_.stream(), {{DNNL_ARG_SRC, cpu::mem(pl.src_md, eng, x.data())},
                                     {DNNL_ARG_DST, cpu::mem(pl.dst_md, eng, maxima)},
                                     {DNNL_ARG_WORKSPACE, memory(pl.train_pd.workspace_desc(), eng, ws->data())},
                                     {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pl.train_pd, eng)}});
    }
    if (!pl.have_bwd) {
      dnnl::pooling_backward::desc d(alg(), pl.src_md, pl.dst_md, {p_.sh, p_.sw}, {p_.kh, p_.kw},
                                     {pl.h.pad_before, pl.w.pad_before}, {pl.h.pad_after, pl.w.pad_after});
      pl.bwd_pd = dnnl::pooling_backward::primitive_desc(d, cpu::user_scratchpad_attr(), eng, pl.train_pd);
      pl.bwd = dnnl::pooling_backward(pl.bwd_pd);
      pl.have_bwd = true;
    }
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, cpu::mem(pl.dst_md, eng, dy.data())},
                                            {DNNL_ARG_DIFF_SRC, cpu::mem(pl.src_md, eng, dx.data())},
                                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pl.bwd_pd, eng)}};
    if (p_.kind == PoolKind::Max) args[DNNL_ARG_WORKSPACE] = memory(pl.train_pd.workspace_desc(), eng, ws->data());
    pl.bwd.execute(c_.stream(), args);
    c_.stream().wait();
    if (ws) consume_workspace(x);  // a second backward recomputes it
  }

  dnnl::algorithm alg() const {
    return p_.kind == PoolKind::Max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  }

  PoolPlan& plan(const Pool2dGeometry& g, const Tensor& x) {
    return cache_.get(shape_type_key(x), [&] {
      PoolPlan pl;
      const auto type = x.dtype() == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
      pl.h = g.h;
      pl.w = g.w;
      pl.src_md = cpu::nhwc_md(x.shape(), type);
      pl.dst_md = cpu::nhwc_md(g.output(), type);
      memory::dims strides = {p_.sh, p_.sw}, kernel = {p_.kh, p_.kw};
      memory::dims pad_l = {pl.h.pad_before, pl.w.pad_before}, pad_r = {pl.h.pad_after, pl.w.pad_after};
      auto& eng = c_.engine();
      auto attr = cpu::user_scratchpad_attr();
      dnnl::pooling_forward::desc dt(dnnl::prop_kind::forward_training, alg(), pl.src_md, pl.dst_md, strides, kernel,
                                     pad_l, pad_r);
      pl.train_pd = dnnl::pooling_forward::primitive_desc(dt, attr, eng);
      pl.train = dnnl::pooling_forward(pl.train_pd);
      dnnl::pooling_forward::desc di(dnnl::prop_kind::forward_inference, alg(), pl.src_md, pl.dst_md, strides, kernel,
                                     pad_l, pad_r);
      pl.infer_pd = dnnl::pooling_forward::primitive_desc(di, attr, eng);
      pl.infer = dnnl::pooling_forward(pl.infer_pd);
      return pl;
    });
  }

  // Max pooling's argmax workspace of a training forward, keyed by the input's address, shape and
  // type, so several forwards (pipeline micro-batches) may precede their backwards; backward
  // releases it. Null when absent and !make. Beyond the cache's bound the oldest is dropped (and
  // recomputed).
  static std::vector<int64_t> ws_key(const Tensor& x) {
    std::vector<int64_t> key = shape_type_key(x);
    key.push_back(int64_t(reinterpret_cast<intptr_t>(x.data())));
    return key;
  }
  // Max pooling's argmax positions for input x: `make` (a training forward) hands out x's buffer,
  // made on first use and kept, so later steps allocate nothing; otherwise the positions of the
  // last training forward of x, or null when none is pending (never made, or consumed by a
  // backward: a second backward recomputes them).
  Tensor* workspace(PoolPlan& pl, const Tensor& x, bool make) {
    if (!make) {
      Workspace* w = workspaces_.find(ws_key(x));
      return w && w->pending ? &w->t : nullptr;
    }
    Workspace& w = workspaces_.get(ws_key(x), [&] {
      return Workspace{c_.empty({int64_t(pl.train_pd.workspace_desc().get_size())}, DType::U8), false};
    });
    w.pending = true;
    return &w.t;
  }
  void consume_workspace(const Tensor& x) {
    if (Workspace* w = workspaces_.find(ws_key(x))) w->pending = false;
  }

  CpuContext& c_;
  cpu::ShapeCache<PoolPlan> cache_;
  Scratch discard_;  // backward's recomputed maxima (only the argmax workspace is needed)
  struct Workspace {
    Tensor t;
    bool pending = false;  // written by a training forward, not yet read by its backward
  };
  cpu::ShapeCache<Workspace, 32> workspaces_;
};

// Global pooling over H x W in plain loops. T is the activations' type (f32 or bf16); the
// arithmetic is f32.
class CpuGlobalPool final : public GlobalPoolKernel {
 public:
  CpuGlobalPool(OpContext& ctx, const GlobalPoolParams& p) : GlobalPoolKernel(ctx, p) {}

 private:
  // f16 is refused by dispatch_float (a capability: the CPU stores f32 and bf16 only).
  void forward_impl(const Tensor& x, Tensor& y) override {
    cpu::dispatch_float(kName, "x", x, [&](auto tag) { forward_t<decltype(tag)>(x, y); });
  }
  void backward_impl(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    cpu::dispatch_float(kName, "x", x, [&](auto tag) { backward_t<decltype(tag)>(x, y, dy, dx); });
  }

  // Channels are reduced in blocks of kBlock f32 accumulators on the stack: a sample's H x W rows
  // are read in order (NHWC), the inner loop runs over contiguous channels and vectorises, and
  // bf16 is rounded once per output.
  static constexpr int64_t kBlock = 256;

  template <class T>
  void forward_t(const Tensor& x, Tensor& y) const {
    const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
    const T* xp = x.as<T>();
    T* yp = y.as<T>();
    if (hw == 0) {  // an empty window: zeros (also bf16's zero bits)
      std::memset(static_cast<void*>(yp), 0, y.bytes());
      return;
    }
    const bool avg = p_.kind == PoolKind::Avg;
    const float inv = pool_math::global_inv(hw);
#pragma omp parallel for schedule(static) if (x.numel() > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* __restrict src = xp + i * hw * C;
      for (int64_t c0 = 0; c0 < C; c0 += kBlock) {
        const int64_t nc = std::min(kBlock, C - c0);
        float acc[kBlock];
        for (int64_t c = 0; c < nc; ++c) acc[c] = avg ? 0.0f : -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < hw; ++s) {
          const T* __restrict r = src + s * C + c0;
          if (avg) {
#pragma omp simd
            for (int64_t c = 0; c < nc; ++c) acc[c] += cpu::to_f32(r[c]);
          } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; ++c) acc[c] = pool_math::max_step(acc[c], cpu::to_f32(r[c]));
          }
        }
        T* __restrict o = yp + i * C + c0;
        for (int64_t c = 0; c < nc; ++c) o[c] = cpu::from_f32<T>(avg ? acc[c] * inv : acc[c]);
      }
    }
  }

  template <class T>
  void backward_t(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) const {
    const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
    if (hw == 0) return;
    const T* xp = x.as<T>();
    const T* dyp = dy.as<T>();
    T* dxp = dx.as<T>();
    const bool avg = p_.kind == PoolKind::Avg;
    const float inv = pool_math::global_inv(hw);
#pragma omp parallel for schedule(static) if (x.numel() > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* __restrict g = dyp + i * C;
      T* __restrict d = dxp + i * hw * C;
      if (avg) {
        for (int64_t s = 0; s < hw; ++s)
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) d[s * C + c] = cpu::from_f32<T>(cpu::to_f32(g[c]) * inv);
      } else {
        // The gradient goes to the first position holding the maximum (as TF's argmax); y is one
        // of x's values, so the comparison is exact in either type.
        const T* __restrict src = xp + i * hw * C;
        const T* __restrict ym = y.as<T>() + i * C;
        std::memset(static_cast<void*>(d), 0, size_t(hw * C) * sizeof(T));
        for (int64_t c = 0; c < C; ++c) {
          const int64_t at =
              pool_math::global_argmax(hw, cpu::to_f32(ym[c]), [&](int64_t s) { return cpu::to_f32(src[s * C + c]); });
          if (at >= 0) d[at * C + c] = g[c];
        }
      }
    }
  }
};

static RegisterKernel<Pool2dKernel, CpuPool2d> reg_pool(DeviceKind::CPU);
static RegisterKernel<GlobalPoolKernel, CpuGlobalPool> reg_global(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
