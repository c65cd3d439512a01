// CPU softmax: last-axis softmax forward/backward and fused softmax cross-entropy with accuracy (its exponentials vectorised on the softmax_exp path).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_exp.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/softmax.h"
#include "core/ops/math/softmax_math.h"

namespace trainer {
namespace {

// Max and log(sum(exp(x - max))) of one row: libm's double exp summed in order (the reference), or
// with kPoly (softmax_exp) cpu::sum_exp_poly.
template <bool kPoly>
void row_lse(const float* x, int64_t C, float& mx, float& lse) {
  mx = x[0];
  double s = 0;
  if constexpr (kPoly) {
    // (A NaN anywhere in the row makes the sum, so lse, the loss and every gradient NaN, as on
    // the reference path, whatever the maximum's reduction made of it.)
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (int64_t j = 1; j < C; ++j) m = std::max(m, x[j]);
    mx = m;
    s = cpu::sum_exp_poly(x, C, mx);
  } else {
    for (int64_t j = 1; j < C; ++j) mx = softmax_math::max_step(mx, x[j]);
    for (int64_t j = 0; j < C; ++j) s += softmax_math::lse_term(x[j], mx);
  }
  lse = softmax_math::lse_of(s);
}

// d[j] = (softmax_j - t_j)·scale for an index label `lab` smoothed by ls (xent_grad): libm's expf,
// or with kPoly cpu::exp_poly, vectorised.
template <bool kPoly>
void sparse_grad(const float* a, int64_t C, float mx, float lse, int64_t lab, float ls, float scale, float* d) {
  const float on = softmax_math::smooth(1.0f, ls, C), off = softmax_math::smooth(0.0f, ls, C);
  if constexpr (kPoly) {
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) d[j] = (cpu::exp_poly(a[j] - mx - lse) - (j == lab ? on : off)) * scale;
  } else {
    for (int64_t j = 0; j < C; ++j) d[j] = softmax_math::xent_grad(a[j], mx, lse, j == lab ? on : off, scale);
  }
}

// The first index of the maximum, or of the first NaN (softmax_math::argmax_better's order), by
// vectorised passes: whether the row holds a NaN and its largest number, then the first index
// holding that number (a scan by argmax_better, one dependent comparison per element, took 60% of
// the fused cross-entropy's time at gpt_bytes' 256 classes). The same index as the scan: ±0 and
// ±inf compare as it compares them, a NaN row goes to the scan for its first NaN.
inline int64_t argmax(const float* x, int64_t C) {
  bool nan = false;
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(|| : nan) reduction(max : m)
  for (int64_t j = 0; j < C; ++j) {
    nan = nan || x[j] != x[j];
    m = std::max(m, x[j]);  // a NaN is skipped: m < NaN is false
  }
  if (nan)
    for (int64_t j = 0; j < C; ++j)
      if (x[j] != x[j]) return j;
  int64_t k = C;
#pragma omp simd reduction(min : k)
  for (int64_t j = 0; j < C; ++j)
    if (x[j] == m) k = std::min(k, j);
  // None equal: every number is -inf, below the max reduction's starting value (clang's is -FLT_MAX,
  // g++'s -inf), and the first index is the scan's.
  return k < C ? k : 0;
}

class CpuSoftmax final : public SoftmaxKernel {
 public:
  CpuSoftmax(OpContext& ctx, const SoftmaxParams& p)
      : SoftmaxKernel(ctx, p), poly_(ctx.fast_paths().has(FastPath::SoftmaxExp)) {}

 private:
  void forward_impl(int64_t rows, int64_t C, const Tensor& x, Tensor& y) override {
    const float* xp = x.f32();
    float* yp = y.f32();
#pragma omp parallel for schedule(static) if (rows * C > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = xp + r * C;
      float* o = yp + r * C;
      float mx = a[0];
      for (int64_t j = 1; j < C; ++j) mx = softmax_math::max_step(mx, a[j]);
      float s = 0;
      for (int64_t j = 0; j < C; ++j) {
        o[j] = softmax_math::exp_shifted(a[j], mx);
        s += o[j];
      }
      float inv = 1.0f / s;
      for (int64_t j = 0; j < C; ++j) o[j] *= inv;
    }
  }

  void backward_impl(int64_t rows, int64_t C, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const float* yp = y.f32();
    const float* gp = dy.f32();
    float* op = dx.f32();
#pragma omp parallel for schedule(static) if (rows * C > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = yp + r * C;
      const float* g = gp + r * C;
      float* o = op + r * C;
      float dot = 0;
      for (int64_t j = 0; j < C; ++j) dot += a[j] * g[j];
      for (int64_t j = 0; j < C; ++j) o[j] = softmax_math::softmax_grad(a[j], g[j], dot);
    }
  }

  LossStats cross_entropy_impl(int64_t N, int64_t C, bool sparse, const Tensor& logits, const Tensor& labels,
                               Tensor& dlogits, float grad_scale) override {
    int64_t scored = N;
    if (sparse) {  // the labels' values: data, checked before anything is written
      const int32_t* lp = labels.i32();
      for (int64_t i = 0; i < N; ++i)
        if (softmax_math::label_ignored(lp[i], ignore_, ignore_class_)) --scored;
        else if (!softmax_math::label_in_range(lp[i], C))
          throw std::out_of_range(
              fmt::format("cross_entropy: label {} (sample {}) is outside the {} classes [0, {})", lp[i], i, C, C));
    }
    const bool grad = dlogits.defined();
    const float ls = label_smoothing_;
    const float* cw = grad ? class_weight_ : nullptr;  // training's loss only
    const float* xp = logits.f32();
    float* dp = grad ? dlogits.f32() : nullptr;
    // Per-sample results are summed afterwards in sample order, so the loss does not depend on the
    // thread count or on how OpenMP combines partial sums.
    std::vector<double> losses(static_cast<size_t>(N));
    std::vector<uint8_t> hits(static_cast<size_t>(N));
#pragma omp parallel for schedule(static) if (N * C > cpu::kParallelGrain)
    for (int64_t i = 0; i < N; ++i) {
      if (sparse && softmax_math::label_ignored(labels.i32()[i], ignore_, ignore_class_)) {
        losses[i] = 0.0;
        hits[i] = 0;
        if (grad) std::fill(dp + i * C, dp + (i + 1) * C, 0.0f);
        continue;
      }
      const float* a = xp + i * C;
      float mx, lse;
      if (poly_) row_lse<true>(a, C, mx, lse);
      else row_lse<false>(a, C, mx, lse);
      int64_t pred = argmax(a, C);
      if (sparse) {
        int64_t lab = labels.i32()[i];
        double shift_sum = 0;
        if (ls != 0.0f)
          for (int64_t j = 0; j < C; ++j) shift_sum += softmax_math::shift_term(a[j], mx);
        const float w = softmax_math::class_weight(cw, lab);
        losses[i] = softmax_math::smoothed_sparse_loss(softmax_math::sparse_loss(lse, a[lab], mx), lse, shift_sum, ls, C);
        if (cw) losses[i] *= double(w);
        hits[i] = pred == lab;
        if (grad && poly_) sparse_grad<true>(a, C, mx, lse, lab, ls, grad_scale * w, dp + i * C);
        else if (grad) sparse_grad<false>(a, C, mx, lse, lab, ls, grad_scale * w, dp + i * C);
      } else {
        const float* t = labels.f32() + i * C;
        double l = 0;
        for (int64_t j = 0; j < C; ++j) softmax_math::dense_loss_add(l, softmax_math::smooth(t[j], ls, C), a[j], mx, lse);
        const int64_t cls = argmax(t, C);
        const float w = softmax_math::class_weight(cw, cls);
        losses[i] = cw ? l * double(w) : l;
        hits[i] = pred == cls;
        if (grad) {
          float* d = dp + i * C;
          for (int64_t j = 0; j < C; ++j)
            d[j] = softmax_math::xent_grad(a[j], mx, lse, softmax_math::smooth(t[j], ls, C), grad_scale * w);
        }
      }
    }
    double loss = 0;
    int64_t correct = 0;
    for (int64_t i = 0; i < N; ++i) {
      loss += losses[i];
      correct += hits[i];
    }
    return {loss, correct, scored};
  }

  const bool poly_;  // FastPath::SoftmaxExp: the index labels' loss and gradient rows
};

static RegisterKernel<SoftmaxKernel, CpuSoftmax> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
