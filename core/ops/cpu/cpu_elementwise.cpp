// CPU element-wise ops: sum of tensors, accumulate, scale, last-axis concat/split, and Philox dropout.
#include <cstring>
#include <string>
#include <vector>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/elementwise.h"
#include "core/ops/philox.h"

namespace trainer {
namespace {

class CpuElementwise final : public ElementwiseKernel {
 public:
  CpuElementwise(OpContext&, const ElementwiseParams&) {}

  void add(const std::vector<const Tensor*>& xs, Tensor& y) override {
    cpu::require_f32("add", "y", y);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i]) cpu::fail("add: input {} is null", i);
      cpu::require_shape("add", ("input " + std::to_string(i)).c_str(), *xs[i], y.shape());
    }
    int64_t n = y.numel();
    float* o = y.f32();  // inputs may alias y: element i is read before it is written
    bool par = n > cpu::kParallelGrain;
    if (xs.empty()) {
      std::memset(o, 0, y.bytes());
      return;
    }
    if (xs.size() == 1) {
      if (xs[0]->data() != o) std::memcpy(o, xs[0]->data(), y.bytes());
      return;
    }
    const float* a = xs[0]->f32();
    const float* b = xs[1]->f32();
#pragma omp parallel for simd schedule(static) if (par)
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
    for (size_t k = 2; k < xs.size(); ++k) {
      const float* c = xs[k]->f32();
      if (c == o) cpu::fail("add: input {} aliases the output", k);
#pragma omp parallel for simd schedule(static) if (par)
      for (int64_t i = 0; i < n; ++i) o[i] += c[i];
    }
  }

  void accumulate(const Tensor& x, Tensor& y) override {
    cpu::require_f32("accumulate", "y", y);
    cpu::require_shape("accumulate", "x", x, y.shape());
    const float* a = x.f32();
    float* o = y.f32();
    int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] += a[i];
  }

  void scale(Tensor& y, float a) override {
    cpu::require_f32("scale", "y", y);
    float* o = y.f32();
    int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] *= a;
  }

  void concat(const std::vector<const Tensor*>& xs, Tensor& y) override {
    cpu::require_f32("concat", "y", y);
    if (y.shape().rank() == 0) cpu::fail("concat: y must have rank >= 1");
    std::vector<Seg> segs;
    int64_t off = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i]) cpu::fail("concat: input {} is null", i);
      const Tensor& x = *xs[i];
      cpu::require_f32("concat", "input", x);
      if (!elementwise::same_lead(x.shape(), y.shape()))
        cpu::fail("concat: input {} [{}] does not match y [{}] outside the last axis", i, x.shape().str(),
                  y.shape().str());
      segs.push_back({x.f32(), off, x.shape().back()});
      off += x.shape().back();
    }
    int64_t width = y.shape().back();
    elementwise::check_concat_width(off, width);
    copy_segments(segs, y.f32(), elementwise::rows_of(y), width, true);
  }

  void split(const Tensor& dy, const std::vector<Tensor*>& dxs) override {
    cpu::require_f32("split", "dy", dy);
    if (dy.shape().rank() == 0) cpu::fail("split: dy must have rank >= 1");
    const int64_t width = dy.shape().back();
    const std::vector<int64_t> w = elementwise::split_widths(dy, dxs);
    std::vector<Seg> segs;
    int64_t off = 0;
    for (size_t i = 0; i < dxs.size(); ++i) {
      if (dxs[i] && dxs[i]->defined()) {
        cpu::require_f32("split", "output", *dxs[i]);
        segs.push_back({dxs[i]->f32(), off, w[i]});
      }
      off += w[i];
    }
    copy_segments(segs, const_cast<float*>(dy.f32()), elementwise::rows_of(dy), width, false);
  }

 private:
  struct Seg {
    const float* p;  // the [rows, c] tensor
    int64_t off, c;  // its columns in the wide tensor
  };
  // into_wide: wide[r, off + j] = seg[r, j]; otherwise seg[r, j] = wide[r, off + j].
  static void copy_segments(const std::vector<Seg>& segs, float* wide, int64_t rows, int64_t width, bool into_wide) {
    if (rows == 0 || segs.empty()) return;
    const Seg* sp = segs.data();
    int64_t ns = int64_t(segs.size());
#pragma omp parallel for schedule(static) if (rows * width > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      float* wr = wide + r * width;
      for (int64_t s = 0; s < ns; ++s) {
        float* nr = const_cast<float*>(sp[s].p) + r * sp[s].c;
        float* __restrict dst = into_wide ? wr + sp[s].off : nr;
        const float* __restrict src = into_wide ? nr : wr + sp[s].off;
        std::memcpy(dst, src, size_t(sp[s].c) * sizeof(float));
      }
    }
  }
};

class CpuDropout final : public DropoutKernel {
 public:
  CpuDropout(OpContext&, const DropoutParams& p) : rate_(p.rate) {
    if (!(p.rate >= 0.0f && p.rate < 1.0f)) cpu::fail("dropout: rate must be in [0, 1), got {}", p.rate);
  }

  void forward(const Tensor& x, Tensor& y, Tensor& mask, uint64_t seed) override {
    cpu::require_f32("dropout", "x", x);
    cpu::require_shape("dropout", "y", y, x.shape());
    check_mask(mask, x.shape());
    int64_t n = x.numel();
    const float* a = x.f32();
    float* o = y.f32();
    uint8_t* m = mask.as<uint8_t>();
    if (rate_ == 0.0f) {
      if (o != a) std::memcpy(o, a, x.bytes());
      std::memset(m, 1, size_t(n));
      return;
    }
    const uint32_t thr = dropout_threshold(rate_);
    const float scale = 1.0f / (1.0f - rate_);
    int64_t groups = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain / 4)
    for (int64_t gi = 0; gi < groups; ++gi) {
      Philox4 r = dropout_words(uint64_t(gi), seed);
      int64_t base = gi * 4;
      int64_t cnt = n - base < 4 ? n - base : 4;
      for (int64_t j = 0; j < cnt; ++j) {
        uint8_t keep = (r.v[j] >> 8) >= thr;
        m[base + j] = keep;
        o[base + j] = keep ? a[base + j] * scale : 0.0f;
      }
    }
  }

  void backward(const Tensor& dy, const Tensor& mask, Tensor& dx) override {
    cpu::require_f32("dropout", "dy", dy);
    cpu::require_shape("dropout", "dx", dx, dy.shape());
    check_mask(mask, dy.shape());
    int64_t n = dy.numel();
    const float* g = dy.f32();
    const uint8_t* m = mask.as<uint8_t>();
    float* o = dx.f32();
    const float scale = 1.0f / (1.0f - rate_);
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = m[i] ? g[i] * scale : 0.0f;
  }

 private:
  static void check_mask(const Tensor& mask, const Shape& s) {
    if (!mask.defined()) cpu::fail("dropout: mask is undefined");
    if (mask.dtype() != DType::U8) cpu::fail("dropout: mask must be u8, got {}", dtype_name(mask.dtype()));
    if (mask.numel() != s.numel()) cpu::fail("dropout: mask [{}] does not match x [{}]", mask.shape().str(), s.str());
  }
  float rate_;
};

static RegisterKernel<ElementwiseKernel, CpuElementwise> reg_ew(DeviceKind::CPU);
static RegisterKernel<DropoutKernel, CpuDropout> reg_drop(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
