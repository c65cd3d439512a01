// CPU element-wise ops: sum, accumulate, f32/bf16 convert, scale, last-axis concat/split and steps reversed (f32 or bf16), Philox dropout (of elements or of whole channels).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/elementwise.h"
#include "core/ops/math/philox.h"

namespace trainer {
namespace {

// y[i] = sum over k of in[k][i], computed in float and stored as T once. Blocks of kSumBlock
// elements are summed in a float buffer (in input order, so f32 sums are those of o = a + b; o += c
// ...), and every input's block is read before y's is written, so inputs may alias y.
constexpr int64_t kSumBlock = 1024;

template <class T>
void sum_into(const std::vector<const T*>& in, T* y, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  const size_t last = in.size() - 1;
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    alignas(64) float acc[kSumBlock];
    const int64_t i0 = blk * kSumBlock, len = std::min(kSumBlock, n - i0);
    const T* a = in[0] + i0;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) acc[j] = cpu::to_f32(a[j]);
    for (size_t k = 1; k < last; ++k) {
      const T* c = in[k] + i0;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) acc[j] += cpu::to_f32(c[j]);
    }
    const T* z = in[last] + i0;
    T* o = y + i0;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) o[j] = cpu::from_f32<T>(acc[j] + cpu::to_f32(z[j]));
  }
}

// Two inputs of any float types (a residual add): one pass, the bits of the sums below and above
// (a + b rounded once), where theirs went through a block of f32 (a copy, the mixed one's a second
// pass): gpt_bytes' eight residual adds (bf16) 0.79 -> 0.64 ms a step. y may alias an input.
template <class T, class A, class B>
void sum2(const A* a, const B* b, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = cpu::from_f32<T>(cpu::to_f32(a[i]) + cpu::to_f32(b[i]));
}

// The same sum over inputs of any float types (f32, bf16), each widened exactly: the bits of
// sum_into over converted copies.
template <class T>
void sum_into_mixed(const std::vector<const Tensor*>& in, T* y, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    alignas(64) float acc[kSumBlock];
    const int64_t i0 = blk * kSumBlock, len = std::min(kSumBlock, n - i0);
    for (size_t k = 0; k < in.size(); ++k)
      cpu::dispatch_float("add", "x", *in[k], [&](auto t) {
        const auto* a = in[k]->as<decltype(t)>() + i0;
        if (k == 0) {
#pragma omp simd
          for (int64_t j = 0; j < len; ++j) acc[j] = cpu::to_f32(a[j]);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < len; ++j) acc[j] += cpu::to_f32(a[j]);
        }
      });
    T* o = y + i0;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) o[j] = cpu::from_f32<T>(acc[j]);
  }
}

class CpuElementwise final : public ElementwiseKernel {
 public:
  CpuElementwise(OpContext& ctx, const ElementwiseParams& p) : ElementwiseKernel(ctx, p) {}

 private:
  // f16 operands are refused by dispatch_float or explicitly (a capability: the CPU stores f32 and
  // bf16 only).
  void add_impl(const std::vector<const Tensor*>& xs, Tensor& y) override {
    cpu::refuse_f16("add", "y", y);
    if (xs.empty()) {
      std::memset(y.data(), 0, y.bytes());
      return;
    }
    bool mixed = false;
    for (const Tensor* x : xs) {
      cpu::refuse_f16("add", "x", *x);  // here, not inside the parallel sum
      mixed |= x->dtype() != y.dtype();
    }
    if (xs.size() == 1 && !mixed) {
      if (xs[0]->data() != y.data()) std::memcpy(y.data(), xs[0]->data(), y.bytes());
      return;
    }
    cpu::dispatch_float("add", "y", y, [&](auto t) {
      using T = decltype(t);
      if (xs.size() == 2)
        return cpu::dispatch_float("add", "x", *xs[0], [&](auto ta) {
          cpu::dispatch_float("add", "x", *xs[1], [&](auto tb) {
            sum2(xs[0]->as<decltype(ta)>(), xs[1]->as<decltype(tb)>(), y.as<T>(), y.numel());
          });
        });
      if (mixed) return sum_into_mixed(xs, y.as<T>(), y.numel());
      std::vector<const T*> in;
      for (const Tensor* x : xs) in.push_back(x->as<T>());
      sum_into(in, y.as<T>(), y.numel());
    });
  }
  bool adds_mixed() const override { return true; }

  void accumulate_impl(const Tensor& x, Tensor& y) override {
    cpu::dispatch_float("accumulate", "y", y, [&](auto ty) {
      cpu::dispatch_float("accumulate", "x", x, [&](auto tx) {
        using Y = decltype(ty);
        using X = decltype(tx);
        const X* a = x.as<X>();
        Y* o = y.as<Y>();
        int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) o[i] = cpu::from_f32<Y>(cpu::to_f32(o[i]) + cpu::to_f32(a[i]));
      });
    });
  }

  void convert_impl(const Tensor& x, Tensor& y) override {
    cpu::refuse_f16("convert", "x", x);
    cpu::refuse_f16("convert", "y", y);
    if (x.dtype() == y.dtype()) {
      if (x.data() != y.data()) std::memcpy(y.data(), x.data(), y.bytes());
      return;
    }
    if (y.dtype() == DType::BF16)
      cpu::round_to_bf16(x.f32(), y.as<cpu::bf16>(), y.numel());
    else
      cpu::widen_bf16(x.as<cpu::bf16>(), y.f32(), y.numel());
  }

  void scale_impl(Tensor& y, float a) override {
    float* o = y.f32();
    int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] *= a;
  }

  // In 32 x 32 tiles (both sides' cache lines used whole), tiles of rows shared among the threads.
  void transpose_impl(int64_t R, int64_t C, const Tensor& x, Tensor& y) override {
    const float* __restrict a = x.f32();
    float* __restrict o = y.f32();
    constexpr int64_t kTile = 32;
#pragma omp parallel for schedule(static) if (R * C > cpu::kParallelGrain)
    for (int64_t r0 = 0; r0 < R; r0 += kTile)
      for (int64_t c0 = 0; c0 < C; c0 += kTile)
        for (int64_t r = r0; r < std::min(R, r0 + kTile); ++r)
          for (int64_t c = c0; c < std::min(C, c0 + kTile); ++c) o[c * R + r] = a[r * C + c];
  }

  // Whole rows moved, by element size: one code path for every type.
  void reverse_steps_impl(int64_t n, int64_t t, int64_t width, const Tensor& x, Tensor& y) override {
    cpu::refuse_f16("reverse_steps", "x", x);
    const size_t row = size_t(width) * dtype_size(x.dtype());
    const char* __restrict a = static_cast<const char*>(x.data());
    char* __restrict o = static_cast<char*>(y.data());
#pragma omp parallel for schedule(static) if (n * t * width > cpu::kParallelGrain)
    for (int64_t r = 0; r < n * t; ++r) {
      const int64_t b = r / t, s = r - b * t;
      std::memcpy(o + size_t(r) * row, a + size_t(b * t + t - 1 - s) * row, row);
    }
  }

  // concat and split move whole elements: one code path for every type, by element size.
  void concat_impl(const std::vector<elementwise::Segment>& segs, Tensor& y) override {
    cpu::refuse_f16("concat", "y", y);
    copy_segments(segs, static_cast<char*>(y.data()), dtype_size(y.dtype()), elementwise::rows_of(y),
                  y.shape().back(), true);
  }

  void split_impl(const Tensor& dy, const std::vector<elementwise::Segment>& segs) override {
    cpu::refuse_f16("split", "dy", dy);
    copy_segments(segs, static_cast<char*>(dy.data()), dtype_size(dy.dtype()), elementwise::rows_of(dy),
                  dy.shape().back(), false);
  }

  // into_wide: wide[r, off + j] = seg[r, j]; otherwise seg[r, j] = wide[r, off + j] (esz bytes an element).
  static void copy_segments(const std::vector<elementwise::Segment>& segs, char* wide, size_t esz, int64_t rows,
                            int64_t width, bool into_wide) {
    if (rows == 0 || segs.empty()) return;
    const elementwise::Segment* sp = segs.data();
    int64_t ns = int64_t(segs.size());
#pragma omp parallel for schedule(static) if (rows * width > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      char* wr = wide + size_t(r * width) * esz;
      for (int64_t s = 0; s < ns; ++s) {
        char* nr = static_cast<char*>(sp[s].data) + size_t(r * sp[s].width) * esz;
        char* __restrict dst = into_wide ? wr + size_t(sp[s].off) * esz : nr;
        const char* __restrict src = into_wide ? nr : wr + size_t(sp[s].off) * esz;
        std::memcpy(dst, src, size_t(sp[s].width) * esz);
      }
    }
  }
};

class CpuDropout final : public DropoutKernel {
 public:
  CpuDropout(OpContext& ctx, const DropoutParams& p) : DropoutKernel(ctx, p) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y, Tensor& mask, DropoutSeed s, int64_t channels) override {
    const uint64_t seed = s.resolve();
    const int64_t n = x.numel(), bits = mask.numel();
    const float* a = x.f32();
    float* o = y.f32();
    uint8_t* m = mask.as<uint8_t>();
    if (p_.rate == 0.0f) {
      if (o != a) std::memcpy(o, a, x.bytes());
      std::memset(m, 1, size_t(bits));
      return;
    }
    const uint32_t thr = dropout_threshold(p_.rate);
    const float scale = dropout_scale(p_.rate);
    const int64_t groups = (bits + 3) / 4;
    // The mask's bits in groups of four words; elements with their bit at once (one per element),
    // or after every bit is drawn (channels: each bit serves P positions).
#pragma omp parallel for schedule(static) if (bits > cpu::kParallelGrain / 4)
    for (int64_t gi = 0; gi < groups; ++gi) {
      Philox4 r = dropout_words(uint64_t(gi), seed);
      const int64_t base = gi * 4, cnt = bits - base < 4 ? bits - base : 4;
      for (int64_t j = 0; j < cnt; ++j) {
        const bool keep = dropout_keep(r.v[j], thr);
        m[base + j] = keep;
        if (!channels) o[base + j] = dropout_apply(keep, a[base + j], scale);
      }
    }
    if (channels) apply_channels(a, m, o, n, n / std::max<int64_t>(bits / channels, 1), channels, scale);
  }

  void backward_impl(const Tensor& dy, const Tensor& mask, Tensor& dx, int64_t channels) override {
    const int64_t n = dy.numel();
    const float* g = dy.f32();
    const uint8_t* m = mask.as<uint8_t>();
    float* o = dx.f32();
    const float scale = dropout_scale(p_.rate);
    if (channels) {
      apply_channels(g, m, o, n, n / std::max<int64_t>(mask.numel() / channels, 1), channels, scale);
      return;
    }
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = dropout_apply(m[i] != 0, g[i], scale);
  }

  // o[i] = v[i] kept by its sample's channel bit m[(i / block)·c + i % c] (block = P·C elements a sample).
  static void apply_channels(const float* v, const uint8_t* m, float* o, int64_t n, int64_t block, int64_t c, float scale) {
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = dropout_apply(m[(i / block) * c + i % c] != 0, v[i], scale);
  }
};

static RegisterKernel<ElementwiseKernel, CpuElementwise> reg_ew(DeviceKind::CPU);
static RegisterKernel<DropoutKernel, CpuDropout> reg_drop(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
