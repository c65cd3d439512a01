// CUDA element-wise ops over f32/bf16/f16: sum of tensors, accumulate, convert, scale, last-axis concat/split, steps reversed; Philox dropout of elements or whole channels (the CPU's masks).
#include <algorithm>
#include <string>
#include <vector>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/elementwise.h"
#include "core/ops/math/philox.h"

namespace trainer {
namespace {

// ---------------------------------------------------------------------------------------------
// Kernels

// Up to Fan inputs summed per launch, left to right, as the CPU does: y = ((x0 + x1) + x2) + ...,
// in float, rounded once to T when stored — the CPU's one rounding (cpu_elementwise.cpp sum_into).
// Fan is 8 (the common sums: a loop of 8 uniform tests per element) or, for more inputs, 32 (264
// bytes of kernel parameters); a sum of more than 32 low-precision tensors is rounded once per
// launch (of 32, then 31 more each).
constexpr int kAddFan = 8, kAddFanWide = 32;
template <class T, int Fan>
struct AddTable {
  const T* p[Fan];
  int count;  // >= 2
};

template <class T, int Fan>
__global__ void add_kernel(AddTable<T, Fan> t, T* y, int64_t n) {
  CUDA_GRID_LOOP(i, n) {
    float s = cuda::to_f32(t.p[0][i]) + cuda::to_f32(t.p[1][i]);
#pragma unroll
    for (int k = 2; k < Fan; ++k)  // constant indices: the table stays in parameter space
      if (k < t.count) s += cuda::to_f32(t.p[k][i]);
    y[i] = cuda::from_f32<T>(s);
  }
}

template <class T, int Fan>
__global__ void add_vec_kernel(AddTable<T, Fan> t, T* y, int64_t packs) {
  constexpr int V = cuda::kVec<T>;
  CUDA_GRID_LOOP(i, packs) {
    float s[V], b[V];
    cuda::load_pack(t.p[0] + i * V, s);
    cuda::load_pack(t.p[1] + i * V, b);
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] += b[j];
#pragma unroll
    for (int k = 2; k < Fan; ++k)
      if (k < t.count) {
        cuda::load_pack(t.p[k] + i * V, b);
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] += b[j];
      }
    cuda::store_pack(y + i * V, s);
  }
}

// dst[r, j] = src[r, j] for r < rows, j < cols, with row strides (leading dimensions) in units of U
// (an element's bits, or 16 bytes: the copies never convert).
template <class U>
__global__ void copy_cols_kernel(const U* src, int64_t src_ld, U* dst, int64_t dst_ld, int64_t rows, int64_t cols) {
  CUDA_GRID_LOOP(i, rows * cols) {
    int64_t r = i / cols, j = i - r * cols;
    dst[r * dst_ld + j] = src[r * src_ld + j];
  }
}

// y[b, s, j] = x[b, t - 1 - s, j] for rows of `width` units U (an element's bits, or 16 bytes).
template <class U>
__global__ void reverse_steps_kernel(const U* x, U* y, int64_t n, int64_t t, int64_t width) {
  CUDA_GRID_LOOP(i, n * t * width) {
    const int64_t r = i / width, j = i - r * width, b = r / t, s = r - b * t;
    y[i] = x[(b * t + t - 1 - s) * width + j];
  }
}

struct Identity {
  __device__ float operator()(float v) const { return v; }
};
struct AddF {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct ScaleF {
  float a;
  __device__ float operator()(float v) const { return v * a; }
};

// Thread per group of 4 elements: group g uses philox4x32(counter = g, key = seed) and element
// 4g + j keeps when dropout_keep(word j, thr), exactly as cpu_elementwise.cpp (philox.h's rules).
// `step` (device memory, may be null): the seed is node_seed(step's seed, seed0), read here.
__global__ void dropout_fwd_kernel(const float* x, float* y, uint8_t* m, int64_t n, uint64_t seed0,
                                   const StepScalars* step, uint32_t thr, float scale, bool vec) {
  const uint64_t seed = DropoutSeed{seed0, step}.resolve();
  const int64_t groups = (n + 3) / 4;
  CUDA_GRID_LOOP(gi, groups) {
    Philox4 r = dropout_words(uint64_t(gi), seed);
    const int64_t base = gi * 4;
    if (vec) {  // n % 4 == 0, x and y 16-byte aligned, m 4-byte aligned
      float4 a = reinterpret_cast<const float4*>(x)[gi];
      uchar4 k;
      k.x = dropout_keep(r.v[0], thr);
      k.y = dropout_keep(r.v[1], thr);
      k.z = dropout_keep(r.v[2], thr);
      k.w = dropout_keep(r.v[3], thr);
      float4 o;
      o.x = dropout_apply(k.x, a.x, scale);
      o.y = dropout_apply(k.y, a.y, scale);
      o.z = dropout_apply(k.z, a.z, scale);
      o.w = dropout_apply(k.w, a.w, scale);
      reinterpret_cast<uchar4*>(m)[gi] = k;
      reinterpret_cast<float4*>(y)[gi] = o;
    } else {
      const int64_t cnt = n - base < 4 ? n - base : 4;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < cnt) {
          const bool keep = dropout_keep(r.v[j], thr);
          m[base + j] = keep;
          y[base + j] = dropout_apply(keep, x[base + j], scale);
        }
    }
  }
}

// A channel mask's bits alone (group g of four from philox4x32(g, seed), as dropout_fwd_kernel's),
// and x (or dy) kept by its sample's channel bit: o[i] = v[i] · m[(i / block)·c + i % c] · scale.
__global__ void dropout_mask_kernel(uint8_t* m, int64_t bits, uint64_t seed0, const StepScalars* step, uint32_t thr) {
  const uint64_t seed = DropoutSeed{seed0, step}.resolve();
  CUDA_GRID_LOOP(gi, (bits + 3) / 4) {
    Philox4 r = dropout_words(uint64_t(gi), seed);
    const int64_t base = gi * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (base + j < bits) m[base + j] = dropout_keep(r.v[j], thr);
  }
}

__global__ void dropout_channels_kernel(const float* v, const uint8_t* m, float* o, int64_t n, int64_t block, int64_t c,
                                        float scale) {
  CUDA_GRID_LOOP(i, n) o[i] = dropout_apply(m[(i / block) * c + i % c] != 0, v[i], scale);
}

__global__ void dropout_bwd_kernel(const float* g, const uint8_t* m, float* dx, int64_t n, float scale) {
  CUDA_GRID_LOOP(i, n) dx[i] = dropout_apply(m[i] != 0, g[i], scale);
}

// ---------------------------------------------------------------------------------------------
// Host side

// y [C, R] = x [R, C]: a 32 x 32 tile through shared memory (a padded row: no bank conflicts) per
// block of 256 threads (8 rows of 32, each copying four); the blocks loop over the tiles.
constexpr int kTile = 32, kTileRows = 8;
__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t R, int64_t C) {
  __shared__ float tile[kTile][kTile + 1];
  const int tx = int(threadIdx.x) % kTile, ty = int(threadIdx.x) / kTile;
  const int64_t tiles_c = (C + kTile - 1) / kTile, tiles = ((R + kTile - 1) / kTile) * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
    for (int k = ty; k < kTile; k += kTileRows) {
      const int64_t r = r0 + k, c = c0 + tx;
      if (r < R && c < C) tile[k][tx] = x[r * C + c];
    }
    __syncthreads();
    for (int k = ty; k < kTile; k += kTileRows) {
      const int64_t c = c0 + k, r = r0 + tx;
      if (c < C && r < R) y[c * R + r] = tile[tx][k];
    }
    __syncthreads();
  }
}

class CudaElementwise final : public ElementwiseKernel {
 public:
  CudaElementwise(OpContext& ctx, const ElementwiseParams& p) : ElementwiseKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void add_impl(const std::vector<const Tensor*>& xs, Tensor& y) override {
    const int64_t n = y.numel();
    if (xs.empty()) {
      c_.fill_zero(y.data(), y.bytes());
      return;
    }
    if (xs.size() == 1) {
      if (xs[0]->data() != y.data()) c_.copy(y.data(), xs[0]->data(), y.bytes());
      return;
    }
    if (n == 0) return;
    cuda::dispatch_float("add", "y", y, [&](auto tag) { add_as<decltype(tag)>(xs, y); });
  }

  void accumulate_impl(const Tensor& x, Tensor& y) override {
    cuda::dispatch_float("accumulate", "y", y, [&](auto ty) {
      using Y = decltype(ty);
      cuda::dispatch_float("accumulate", "x", x, [&](auto tx) {
        using X = decltype(tx);
        cuda::tmap2(c_, cuda::ptr<const Y>(y), cuda::ptr<const X>(x), cuda::ptr<Y>(y), y.numel(), AddF{});
      });
    });
  }

  // Widening is exact; narrowing rounds to nearest even (bf16 and f16 alike, NaN kept).
  void convert_impl(const Tensor& x, Tensor& y) override {
    if (x.dtype() == y.dtype()) {
      if (x.data() != y.data()) c_.copy(y.data(), x.data(), y.bytes());
      return;
    }
    cuda::dispatch_float("convert", "y", y, [&](auto ty) {
      using Y = decltype(ty);
      cuda::dispatch_float("convert", "x", x, [&](auto tx) {
        using X = decltype(tx);
        cuda::tmap1(c_, cuda::ptr<const X>(x), cuda::ptr<Y>(y), y.numel(), Identity{});
      });
    });
  }

  void scale_impl(Tensor& y, float a) override { cuda::tmap1(c_, y.f32(), y.f32(), y.numel(), ScaleF{a}); }

  void transpose_impl(int64_t R, int64_t C, const Tensor& x, Tensor& y) override {
    if (R == 0 || C == 0) return;
    const int64_t tiles = ((R + kTile - 1) / kTile) * ((C + kTile - 1) / kTile);
    TRAINER_LAUNCH(transpose_kernel, unsigned(std::min<int64_t>(tiles, int64_t(1) << 20)), unsigned(kTile * kTileRows),
                   c_.stream(), x.f32(), y.f32(), R, C);
  }

  void reverse_steps_impl(int64_t n, int64_t t, int64_t width, const Tensor& x, Tensor& y) override {
    const size_t esz = dtype_size(x.dtype());
    const int64_t bytes = width * int64_t(esz), total = n * t * width;
    if (total == 0) return;
    if (bytes % 16 == 0 && cuda::aligned16(x.data()) && cuda::aligned16(y.data()))
      reverse_as<uint4>(x, y, n, t, bytes / 16);
    else if (esz == 4)
      reverse_as<uint32_t>(x, y, n, t, width);
    else
      reverse_as<uint16_t>(x, y, n, t, width);
  }
  template <class U>
  void reverse_as(const Tensor& x, Tensor& y, int64_t n, int64_t t, int64_t width) {
    TRAINER_LAUNCH(reverse_steps_kernel<U>, cuda::grid_for(n * t * width, c_), cuda::kBlock, c_.stream(),
                   static_cast<const U*>(x.data()), static_cast<U*>(y.data()), n, t, width);
  }

  void concat_impl(const std::vector<elementwise::Segment>& segs, Tensor& y) override {
    copy_segments(segs, static_cast<char*>(y.data()), dtype_size(y.dtype()), elementwise::rows_of(y),
                  y.shape().back(), true);
  }

  void split_impl(const Tensor& dy, const std::vector<elementwise::Segment>& segs) override {
    copy_segments(segs, static_cast<char*>(dy.data()), dtype_size(dy.dtype()), elementwise::rows_of(dy),
                  dy.shape().back(), false);
  }

  template <class T>
  void add_as(const std::vector<const Tensor*>& xs, Tensor& y) {
    if (xs.size() <= size_t(kAddFan)) return add_as<T, kAddFan>(xs, y);
    add_as<T, kAddFanWide>(xs, y);
  }
  template <class T, int Fan>
  void add_as(const std::vector<const Tensor*>& xs, Tensor& y) {
    T* o = cuda::ptr<T>(y);
    const int64_t n = y.numel();
    // First launch: x0 + ... + x(Fan-1); each further launch continues y + x(Fan) + ..., so the
    // summation order is the CPU's left-to-right order.
    size_t next = 0;
    while (next < xs.size()) {
      AddTable<T, Fan> t{};
      int cnt = 0;
      if (next > 0) t.p[cnt++] = o;
      while (cnt < Fan && next < xs.size()) t.p[cnt++] = cuda::ptr<const T>(*xs[next++]);
      t.count = cnt;  // >= 2: the first launch takes two inputs or more, each later one y and one or more
      bool vec = n % cuda::kVec<T> == 0 && cuda::aligned16(o);
      for (int k = 0; k < cnt; ++k) vec = vec && cuda::aligned16(t.p[k]);
      if (vec)
        TRAINER_LAUNCH((add_vec_kernel<T, Fan>), cuda::grid_for(n / cuda::kVec<T>, c_), cuda::kBlock, c_.stream(), t, o,
                       n / cuda::kVec<T>);
      else
        TRAINER_LAUNCH((add_kernel<T, Fan>), cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), t, o, n);
    }
  }

  // into_wide: wide[r, off + j] = seg[r, j]; otherwise seg[r, j] = wide[r, off + j], for elements
  // of `esz` bytes. One launch per segment; 16-byte units when the offsets, widths and pointers
  // allow it.
  void copy_segments(const std::vector<elementwise::Segment>& segs, char* wide, size_t esz, int64_t rows,
                     int64_t width, bool into_wide) {
    if (rows == 0) return;
    for (const elementwise::Segment& s : segs) {
      if (s.width == 0) continue;
      char* narrow = static_cast<char*>(s.data);
      char* wcol = wide + s.off * int64_t(esz);
      const char* src = into_wide ? narrow : wcol;
      char* dst = into_wide ? wcol : narrow;
      const int64_t src_ld = into_wide ? s.width : width, dst_ld = into_wide ? width : s.width;  // in elements
      const int64_t per16 = int64_t(16 / esz);
      if (s.width % per16 == 0 && width % per16 == 0 && cuda::aligned16(src) && cuda::aligned16(dst))
        copy_as<uint4>(src, src_ld / per16, dst, dst_ld / per16, rows, s.width / per16);
      else if (esz == 4)
        copy_as<uint32_t>(src, src_ld, dst, dst_ld, rows, s.width);
      else
        copy_as<uint16_t>(src, src_ld, dst, dst_ld, rows, s.width);
    }
  }

  template <class U>
  void copy_as(const char* src, int64_t src_ld, char* dst, int64_t dst_ld, int64_t rows, int64_t cols) {
    TRAINER_LAUNCH(copy_cols_kernel<U>, cuda::grid_for(rows * cols, c_), cuda::kBlock, c_.stream(),
                   reinterpret_cast<const U*>(src), src_ld, reinterpret_cast<U*>(dst), dst_ld, rows, cols);
  }

  CudaContext& c_;
};

class CudaDropout final : public DropoutKernel {
 public:
  CudaDropout(OpContext& ctx, const DropoutParams& p) : DropoutKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y, Tensor& mask, DropoutSeed s, int64_t channels) override {
    const int64_t n = x.numel(), bits = mask.numel();
    const float* a = x.f32();
    float* o = y.f32();
    uint8_t* m = mask.as<uint8_t>();
    if (p_.rate == 0.0f) {
      if (o != a) c_.copy(o, a, x.bytes());
      if (bits > 0) CUDA_CHECK(cudaMemsetAsync(m, 1, size_t(bits), c_.stream()));
      return;
    }
    if (n == 0) return;
    const uint32_t thr = dropout_threshold(p_.rate);
    const float scale = dropout_scale(p_.rate);
    if (channels) {
      TRAINER_LAUNCH(dropout_mask_kernel, cuda::grid_for((bits + 3) / 4, c_), cuda::kBlock, c_.stream(), m, bits, s.value,
                     s.step, thr);
      TRAINER_LAUNCH(dropout_channels_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), a, m, o, n,
                     n / (bits / channels), channels, scale);
      return;
    }
    const bool vec = n % 4 == 0 && cuda::aligned16(a) && cuda::aligned16(o) && cuda::aligned4(m);
    TRAINER_LAUNCH(dropout_fwd_kernel, cuda::grid_for((n + 3) / 4, c_), cuda::kBlock, c_.stream(), a, o, m, n, s.value,
                   s.step, thr, scale, vec);
  }

  void backward_impl(const Tensor& dy, const Tensor& mask, Tensor& dx, int64_t channels) override {
    const int64_t n = dy.numel();
    if (n == 0) return;
    const float scale = dropout_scale(p_.rate);
    if (channels) {
      TRAINER_LAUNCH(dropout_channels_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), dy.f32(),
                     mask.as<const uint8_t>(), dx.f32(), n, n / (mask.numel() / channels), channels, scale);
      return;
    }
    TRAINER_LAUNCH(dropout_bwd_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), dy.f32(),
                   mask.as<const uint8_t>(), dx.f32(), n, scale);
  }

  CudaContext& c_;
};

static RegisterKernel<ElementwiseKernel, CudaElementwise> reg_ew(DeviceKind::CUDA);
static RegisterKernel<DropoutKernel, CudaDropout> reg_drop(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
