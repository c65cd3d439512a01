// Batch norm's row loops on the CPU (cpu_batchnorm.cpp): fixed-order reductions over rows and the element passes, over one batch norm's channels or several siblings'.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/activation_math.h"
#include "core/ops/math/batchnorm_math.h"

namespace trainer::cpu_bn {

// Reductions over rows are split in chunks whose count depends on the row count only, and the
// chunk results are added in order, so the statistics do not depend on the thread count. Inside a
// chunk, blocks of kBlock rows are summed in float (vectorised) and added to double accumulators.
constexpr int64_t kBlock = 64;

struct Chunks {
  int64_t n, rows;  // number of chunks, rows per chunk
};

inline Chunks chunking(int64_t m) {
  int64_t n = std::clamp<int64_t>((m + 255) / 256, 1, 64);
  return {n, (m + n - 1) / n};
}

// Two per-channel sums over all rows: the row kernel `row(r, fs, fq)` adds its row's terms into the
// float accumulators fs[C] and fq[C]. Returns [2C] doubles (the sums of fs, then of fq), valid until
// the thread's next reduction.
template <class RowFn>
const double* reduce_rows(int64_t m, int64_t C, const RowFn& row) {
  Chunks ch = chunking(m);
  size_t nd = size_t(ch.n) * 2 * C;
  double* out = static_cast<double*>(cpu::thread_scratch(cpu::kScratchReduce, nd * (sizeof(double) + sizeof(float))));
  float* ftmp = reinterpret_cast<float*>(out + nd);
#pragma omp parallel for schedule(static) if (m * C > cpu::kParallelGrain)
  for (int64_t k = 0; k < ch.n; ++k) {
    double* ds = out + k * 2 * C;
    double* dq = ds + C;
    float* fs = ftmp + k * 2 * C;
    float* fq = fs + C;
    std::fill(ds, ds + 2 * C, 0.0);
    int64_t r1 = std::min(m, (k + 1) * ch.rows);
    for (int64_t r = k * ch.rows; r < r1; r += kBlock) {
      std::fill(fs, fs + 2 * C, 0.0f);
      int64_t re = std::min(r1, r + kBlock);
      for (int64_t i = r; i < re; ++i) row(i, fs, fq);
      for (int64_t c = 0; c < C; ++c) {
        ds[c] += fs[c];
        dq[c] += fq[c];
      }
    }
  }
  for (int64_t k = 1; k < ch.n; ++k)
    for (int64_t c = 0; c < 2 * C; ++c) out[c] += out[k * 2 * C + c];
  return out;
}

// A fused activation (BatchNormParams::activation) is the activation kernel's clamp
// (activation_math.h), applied to the output; backward passes dy where the stored y is inside the
// clamp. Backward does not read y: it decides that from x with the coefficients a, b of the forward
// pass it follows (kept by the kernel, which each layer copy owns, as it owns the saved
// statistics): v = x·a + b, the value forward clamped and stored, is compared with the gate
// act::rounded_gate gives for the stored type (f32: the clamp's bounds; bf16: the bounds moved to
// where the rounding changes sides, so no rounding is redone), the same decision bit for bit. So
// each backward pass reads x and dy only. Measured with 2 threads, alternated runs: f32 MobileNetV2
// 224² batch 16, batch norm backward 61-70 -> 49-59 ms per step; f32 MiniGoogLeNet batch 64,
// 17-22 -> 12-14 ms; bf16 with the gate (2026-11-27), alternated against reading y: MiniGoogLeNet
// batch 64 14.1-14.3 -> 13.4-13.5 ms, MobileNetV2 batch 16 median of five 39.7 -> 36.3 ms. (Redoing
// the bf16 rounding instead had cost more than the read it saves.) The loops below take the
// activation as a compile-time flag `A` (false: no activation, y not used), so batch norm alone
// runs exactly as before.
using act::Clamp;

// Forward's output value before its rounding to T: x·a + b, clamped when A.
template <bool A>
inline float affine_value(float x, float a, float b, Clamp bounds) {
  float v = bn::normalise(x, a, b);
  if constexpr (A) v = act::clamp(v, bounds);
  return v;
}

// Where backward finds whether y passed the activation's gradient: y read, or decided from x
// (Recompute) with forward's coefficients and the stored type's gate (see above).
template <class T, bool Recompute>
struct YSource {
  const T* y = nullptr;                    // [m, C] (rows ld apart), read unless Recompute
  int64_t ld = 0;
  const float *a = nullptr, *b = nullptr;  // forward's coefficients [C], when Recompute
  Clamp gate;                              // act::rounded_gate of the clamp for T, when Recompute
  // dy through the activation at [r, c] (x: the input there).
  float pass(float g, int64_t r, int64_t c, float x, Clamp bounds) const {
    if constexpr (Recompute) {
      const float v = bn::normalise(x, a[c], b[c]), lo = gate.lo, hi = gate.hi;  // both loaded: a vector loop
      return v > lo && v < hi ? g : 0.0f;
    } else {
      return act::through(g, cpu::to_f32(y[r * ld + c]), bounds);
    }
  }
};

// dy's strided rows (a concat's channel slice: under half of each row in MiniGoogLeNet) are
// fetched ahead in software, about 2 KB ahead (4 to 64 rows tried): the hardware's prefetch does not
// keep up with rows that skip half of each run of lines. Batch norm alone (f32, 2 threads, fused
// ReLU, [65536, 32] in rows 64 apart): backward 1.8-2.1 -> 1.2 ms (contiguous rows: 0.7). Fetching
// y's rows ahead for forward's writes changed nothing measurable (tried). For row r of rows whose
// first C elements are at p + r * ld, `ahead` = prefetch_rows(ld).
template <class T>
int64_t prefetch_rows(int64_t ld) {
  return std::max<int64_t>(1, 2048 / std::max<int64_t>(1, ld * int64_t(sizeof(T))));
}
template <class T>
inline void prefetch_ahead(const T* p, int64_t r, int64_t ahead, int64_t ld, int64_t C, int64_t m) {
  if (ld == C || r + ahead >= m) return;
  const char* b = reinterpret_cast<const char*>(p + (r + ahead) * ld);
  for (int64_t o = 0; o < C * int64_t(sizeof(T)); o += 64) __builtin_prefetch(b + o, 0, 3);
}

// Calls f(std::true_type) when the activation is fused, else f(std::false_type).
template <class F>
decltype(auto) with_activation(ActKind k, F&& f) {
  if (k != ActKind::Linear) return f(std::true_type{});
  return f(std::false_type{});
}

// One batch norm's x and dx ([m, C] rows, contiguous; dx may be null) and its channels [at, at + C)
// of y's and dy's rows and of the per-channel arrays: several parts for sibling batch norms run as
// one pass (forward_siblings, backward_siblings), one otherwise. The inner loops are one batch
// norm's, so the results are the same bit for bit.
template <class T>
struct Part {
  const T* x;
  T* dx;
  int64_t C, at;
};

// [2W]: per channel, sum (x - shift), then sum (x - shift)^2 (the parts' W channels); as reduce_rows.
template <class T>
const double* reduce_centred(const std::vector<Part<T>>& parts, const float* sh, int64_t m, int64_t W) {
  return reduce_rows(m, W, [&](int64_t r, float* __restrict fs, float* __restrict fq) {
    for (const Part<T>& p : parts) {
      const T* __restrict xr = p.x + r * p.C;
      float* __restrict s = fs + p.at;
      float* __restrict q = fq + p.at;
      const float* h = sh + p.at;
#pragma omp simd
      for (int64_t c = 0; c < p.C; ++c) {
        float d = cpu::to_f32(xr[c]) - h[c];
        s[c] += d;
        q[c] += d * d;
      }
    }
  });
}

// y[r, at + c] = x[r, c] * a[at + c] + b[at + c] for each part (clamped when A; y's rows ldy apart)
template <bool A, class T>
void affine_rows(const std::vector<Part<T>>& parts, const float* a, const float* b, T* y, int64_t ldy, Clamp bounds,
                 int64_t m, int64_t W) {
#pragma omp parallel for schedule(static) if (m * W > cpu::kParallelGrain)
  for (int64_t r = 0; r < m; ++r)
    for (const Part<T>& p : parts) {
      const T* __restrict xr = p.x + r * p.C;
      T* __restrict yr = y + r * ldy + p.at;
      const float *__restrict pa = a + p.at, *__restrict pb = b + p.at;
#pragma omp simd
      for (int64_t c = 0; c < p.C; ++c)
        yr[c] = cpu::from_f32<T>(affine_value<A>(cpu::to_f32(xr[c]), pa[c], pb[c], bounds));
    }
}

// [2W]: per channel, sum dy, then sum dy * (x - mean) (the parts' W channels in all; dy's rows ldd
// apart; dy taken through the activation from y when A); as reduce_rows.
template <bool A, class T, bool Recompute>
const double* reduce_dy_dyxmu(const std::vector<Part<T>>& parts, const T* dyp, int64_t ldd,
                              YSource<T, Recompute> ys, Clamp bounds, const float* mean, int64_t m, int64_t W) {
  const int64_t ahead = prefetch_rows<T>(ldd);
  return reduce_rows(m, W, [&](int64_t r, float* __restrict fs, float* __restrict fq) {
    prefetch_ahead(dyp, r, ahead, ldd, W, m);
    for (const Part<T>& p : parts) {
      const T* __restrict xr = p.x + r * p.C;
      const T* __restrict dr = dyp + r * ldd + p.at;
      float* __restrict s = fs + p.at;
      float* __restrict q = fq + p.at;
      const float* mu = mean + p.at;
#pragma omp simd
      for (int64_t c = 0; c < p.C; ++c) {
        const float xv = cpu::to_f32(xr[c]);
        float g = cpu::to_f32(dr[c]);
        if constexpr (A) g = ys.pass(g, r, p.at + c, xv, bounds);
        s[c] += g;
        q[c] += g * (xv - mu[c]);
      }
    }
  });
}

// dx[r, c] = P[c] * dy[r, c] + Q[c] * (x[r, c] - mean[c]) + R[c] for each part with a dx: the input
// gradient of backward and backward_apply, whose coefficients fold gamma, invstd and the two
// gradient sums (dy taken through the activation from y when A; dy's rows ldd apart).
template <bool A, class T, bool Recompute>
void apply_dx(const std::vector<Part<T>>& parts, const T* dy, int64_t ldd, YSource<T, Recompute> ys, Clamp bounds,
              const float* mean, const float* P, const float* Q, const float* R, int64_t m, int64_t W) {
  const int64_t ahead = prefetch_rows<T>(ldd);
#pragma omp parallel for schedule(static) if (m * W > cpu::kParallelGrain)
  for (int64_t r = 0; r < m; ++r) {
    prefetch_ahead(dy, r, ahead, ldd, W, m);
    for (const Part<T>& p : parts) {
      if (!p.dx) continue;
      const T* __restrict xr = p.x + r * p.C;
      const T* __restrict dr = dy + r * ldd + p.at;
      T* __restrict o = p.dx + r * p.C;
      const float *mu = mean + p.at, *pp = P + p.at, *qq = Q + p.at, *rr = R + p.at;
#pragma omp simd
      for (int64_t c = 0; c < p.C; ++c) {
        const float xv = cpu::to_f32(xr[c]);
        float g = cpu::to_f32(dr[c]);
        if constexpr (A) g = ys.pass(g, r, p.at + c, xv, bounds);
        o[c] = cpu::from_f32<T>(bn::input_grad(g, xv, mu[c], pp[c], qq[c], rr[c]));
      }
    }
  }
}

}  // namespace trainer::cpu_bn
