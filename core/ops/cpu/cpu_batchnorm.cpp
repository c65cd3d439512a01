// CPU batchnorm: statistics, normalisation (fused ReLU/ReLU6) and gradients over f32 or bf16 [rows, C]; y, dy may be strided.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "core/ops/math/activation_math.h"
#include "core/ops/batchnorm.h"
#include "core/ops/math/batchnorm_math.h"
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

// Reductions over rows are split in chunks whose count depends on the row count only, and the
// chunk results are added in order, so the statistics do not depend on the thread count. Inside a
// chunk, blocks of kBlock rows are summed in float (vectorised) and added to double accumulators.
constexpr int64_t kBlock = 64;

struct Chunks {
  int64_t n, rows;  // number of chunks, rows per chunk
};

Chunks chunking(int64_t m) {
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

// [2C]: per channel, sum (x - shift), then sum (x - shift)^2 (x [m, C]); as reduce_rows.
template <class T>
const double* reduce_centred(const T* xp, const float* sh, int64_t m, int64_t C) {
  return reduce_rows(m, C, [&](int64_t r, float* __restrict fs, float* __restrict fq) {
    const T* __restrict xr = xp + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float d = cpu::to_f32(xr[c]) - sh[c];
      fs[c] += d;
      fq[c] += d * d;
    }
  });
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
// of dy's (and y's) rows and of the per-channel arrays: several parts for sibling batch norms run as
// one pass (backward_siblings), one otherwise. The inner loops are the one-part loops'.
template <class T>
struct Part {
  const T* x;
  T* dx;
  int64_t C, at;
};

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

// y[r, c] = x[r, c] * a[c] + b[c] (clamped when A; y's rows ldy apart)
template <bool A, class T>
void affine_rows(const T* __restrict x, const float* __restrict a, const float* __restrict b, T* __restrict y,
                 int64_t ldy, Clamp bounds, int64_t m, int64_t C) {
#pragma omp parallel for schedule(static) if (m * C > cpu::kParallelGrain)
  for (int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * ldy;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = cpu::from_f32<T>(affine_value<A>(cpu::to_f32(xr[c]), a[c], b[c], bounds));
  }
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

class CpuBatchNorm final : public BatchNormKernel {
 public:
  CpuBatchNorm(OpContext& ctx, const BatchNormParams& p)
      : BatchNormKernel(ctx, p),
        act_(act::clamp_of(p.activation)),
        gate_bf16_(act::rounded_gate(act_, [](float v) { return cpu::to_f32(cpu::round_bf16(v)); })) {}
  bool strided_rows() const override { return true; }

 private:
  void forward_train_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean, Tensor& running_var) override {
    cpu::refuse_f16(kName, "x", x);
    if (C == 0) return;
    float* mean = save_mean.f32();
    float* invstd = save_invstd.f32();
    fwd_mean_ = nullptr;  // no coefficients kept until this pass has made them
    if (m == 0) {  // no samples: no statistics; leave the running statistics alone
      std::fill(mean, mean + C, 0.0f);
      std::fill(invstd, invstd + C, bn::empty_invstd(p_.epsilon));
      return;
    }
    cpu::dispatch_float("batchnorm", "x", x, [&](auto t) {
      using T = decltype(t);
      const T* xp = x.as<T>();
      // Shifting by the first row keeps the one-pass variance accurate when |mean| >> std.
      std::vector<float> shift(C);
      for (int64_t c = 0; c < C; ++c) shift[c] = cpu::to_f32(xp[c]);
      const double* part = reduce_centred(xp, shift.data(), m, C);
      std::vector<float> a(C), b(C);
      float* rm = running_mean.f32();
      float* rv = running_var.f32();
      for (int64_t c = 0; c < C; ++c) {
        const bn::TrainStats st = bn::train_stats(
            part[c], part[C + c], double(m), shift[c], gamma.defined() ? gamma.f32()[c] : 1.0,
            beta.defined() ? beta.f32()[c] : 0.0, double(p_.epsilon), double(p_.momentum), rm[c], rv[c],
            p_.unbiased_moving_variance);
        mean[c] = st.mean;
        invstd[c] = st.invstd;
        a[c] = st.a;
        b[c] = st.b;
        rm[c] = st.running_mean;
        rv[c] = st.running_var;
      }
      with_activation(p_.activation, [&](auto a_on) {
        affine_rows<decltype(a_on)::value>(xp, a.data(), b.data(), y.as<T>(), y.row_stride(), act_, m, C);
      });
      if (p_.activation != ActKind::Linear) {  // for backward's activation gate
        fwd_a_.swap(a);
        fwd_b_.swap(b);
        fwd_mean_ = save_mean.data();
        fwd_rows_ = m;
        fwd_type_ = x.dtype();
      }
    });
  }

  void forward_infer_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& running_mean, const Tensor& running_var, Tensor& y) override {
    cpu::refuse_f16(kName, "x", x);
    if (m == 0 || C == 0) return;
    std::vector<float> a(C), b(C);
    for (int64_t c = 0; c < C; ++c) {
      const bn::Affine af =
          bn::infer_affine(gamma.defined() ? gamma.f32()[c] : 1.0, beta.defined() ? beta.f32()[c] : 0.0,
                           running_mean.f32()[c], running_var.f32()[c], double(p_.epsilon));
      a[c] = af.a;
      b[c] = af.b;
    }
    cpu::dispatch_float("batchnorm", "x", x, [&](auto t) {
      using T = decltype(t);
      with_activation(p_.activation, [&](auto a_on) {
        affine_rows<decltype(a_on)::value>(x.as<T>(), a.data(), b.data(), y.as<T>(), y.row_stride(), act_, m, C);
      });
    });
  }

  bool joins_siblings() const override { return true; }

  void backward_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& dy,
                     const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
                     Tensor& dbeta) override {
    backward_parts(m, C, y, dy, {Sibling{this, &x, &gamma, &save_mean, &save_invstd, &dx, &dgamma, &dbeta}});
  }
  void backward_siblings_impl(int64_t m, int64_t W, const Tensor& y, const Tensor& dy,
                              const std::vector<Sibling>& parts) override {
    backward_parts(m, W, y, dy, parts);
  }

  // backward of one batch norm or of siblings (batchnorm.h), over the W channels of dy's rows.
  void backward_parts(int64_t m, int64_t W, const Tensor& y, const Tensor& dy, const std::vector<Sibling>& sibs) {
    cpu::refuse_f16(kName, "x", *sibs[0].x);
    if (W == 0) return;
    if (m == 0) {
      for (const Sibling& s : sibs)
        for (Tensor* t : {s.dgamma, s.dbeta})
          if (t->defined()) std::memset(t->data(), 0, t->bytes());
      return;
    }
    // Per channel of all parts: the saved statistics and gamma; the activation's gate decided from
    // x where each part's kernel kept the coefficients of the forward pass these statistics come
    // from, else y is read.
    Channels ch;
    bool kept = p_.activation != ActKind::Linear;
    for (const Sibling& s : sibs) {
      const auto* k = dynamic_cast<const CpuBatchNorm*>(s.kernel);
      if (!k) throw std::logic_error("batchnorm: a sibling's kernel is not the CPU's");
      const int64_t C = s.x->shape().back();
      const float* g = s.gamma->defined() ? s.gamma->f32() : nullptr;
      for (int64_t c = 0; c < C; ++c) {
        ch.mean.push_back(s.save_mean->f32()[c]);
        ch.invstd.push_back(s.save_invstd->f32()[c]);
        ch.gamma.push_back(g ? g[c] : 1.0f);
      }
      kept = kept && k->fwd_mean_ == s.save_mean->data() && k->fwd_rows_ == m && k->fwd_type_ == s.x->dtype() &&
             int64_t(k->fwd_a_.size()) == C;
      if (kept) {
        ch.a.insert(ch.a.end(), k->fwd_a_.begin(), k->fwd_a_.end());
        ch.b.insert(ch.b.end(), k->fwd_b_.begin(), k->fwd_b_.end());
      }
    }
    cpu::dispatch_float("batchnorm", "x", *sibs[0].x, [&](auto t) {
      using T = decltype(t);
      std::vector<Part<T>> parts;
      int64_t at = 0;
      for (const Sibling& s : sibs) {
        parts.push_back({s.x->as<T>(), s.dx->defined() ? s.dx->as<T>() : nullptr, s.x->shape().back(), at});
        at += parts.back().C;
      }
      if (kept) {
        const Clamp gate = std::is_same_v<T, float> ? act_ : gate_bf16_;
        backward_as<true>(parts, YSource<T, true>{nullptr, 0, ch.a.data(), ch.b.data(), gate}, dy, ch, m, W);
        return;
      }
      with_activation(p_.activation, [&](auto a_on) {
        constexpr bool A = decltype(a_on)::value;
        const YSource<T, false> ys{A ? y.as<T>() : nullptr, A ? y.row_stride() : 0, nullptr, nullptr, {}};
        backward_as<A>(parts, ys, dy, ch, m, W);
      });
    });
    int64_t at = 0;
    for (const Sibling& s : sibs) {
      const int64_t C = s.x->shape().back();
      if (s.dgamma->defined()) std::copy(ch.dgamma.begin() + at, ch.dgamma.begin() + at + C, s.dgamma->f32());
      if (s.dbeta->defined()) std::copy(ch.dbeta.begin() + at, ch.dbeta.begin() + at + C, s.dbeta->f32());
      at += C;
    }
  }

  // --- Synchronised batch norm pieces (see batchnorm.h).

  void channel_sums_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& shift, Tensor& sum,
                         Tensor& sumsq) override {
    cpu::refuse_f16(kName, "x", x);
    if (C == 0) return;
    if (m == 0) {
      std::fill(sum.f32(), sum.f32() + C, 0.0f);
      std::fill(sumsq.f32(), sumsq.f32() + C, 0.0f);
      return;
    }
    std::vector<float> zero;
    if (!shift.defined()) zero.assign(size_t(C), 0.0f);
    const float* sh = shift.defined() ? shift.f32() : zero.data();
    const double* part = cpu::dispatch_float("batchnorm", "x", x, [&](auto t) {
      using T = decltype(t);
      return reduce_centred(x.as<T>(), sh, m, C);
    });
    for (int64_t c = 0; c < C; ++c) {
      sum.f32()[c] = float(part[c]);
      sumsq.f32()[c] = float(part[C + c]);
    }
  }

  void backward_sums_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& mean, Tensor& sum_dy,
                          Tensor& sum_dy_xmu) override {
    cpu::refuse_f16(kName, "x", x);
    if (C == 0) return;
    if (m == 0) {
      std::fill(sum_dy.f32(), sum_dy.f32() + C, 0.0f);
      std::fill(sum_dy_xmu.f32(), sum_dy_xmu.f32() + C, 0.0f);
      return;
    }
    const double* part = cpu::dispatch_float("batchnorm", "x", x, [&](auto t) {
      using T = decltype(t);
      return reduce_dy_dyxmu<false>(std::vector<Part<T>>{{x.as<T>(), nullptr, C, 0}}, dy.as<T>(), dy.row_stride(),
                                    YSource<T, false>{}, act_, mean.f32(), m, C);
    });
    for (int64_t c = 0; c < C; ++c) {
      sum_dy.f32()[c] = float(part[c]);
      sum_dy_xmu.f32()[c] = float(part[C + c]);
    }
  }

  void backward_apply_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& invstd, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                           double count, Tensor& dx) override {
    cpu::refuse_f16(kName, "x", x);
    if (m == 0 || C == 0) return;
    // dx = p*dy + q*(x - mean) + r (bn::apply_coef: as in backward, whose sums and count are this batch's).
    std::vector<float> pa(C), qa(C), ra(C);
    for (int64_t c = 0; c < C; ++c) {
      const bn::InputGrad k = bn::apply_coef(gamma.defined() ? gamma.f32()[c] : 1.0, invstd.f32()[c], sum_dy.f32()[c],
                                             sum_dy_xmu.f32()[c], count);
      pa[c] = k.p;
      qa[c] = k.q;
      ra[c] = k.r;
    }
    cpu::dispatch_float("batchnorm", "x", x, [&](auto t) {
      using T = decltype(t);
      apply_dx<false>(std::vector<Part<T>>{{x.as<T>(), dx.as<T>(), C, 0}}, dy.as<T>(), dy.row_stride(),
                      YSource<T, false>{}, act_, mean.f32(), pa.data(), qa.data(), ra.data(), m, C);
    });
  }

  // Per channel of one backward_parts call: the parts' statistics and gamma, forward's kept
  // coefficients (when used), and the parameter gradients.
  struct Channels {
    std::vector<float> mean, invstd, gamma, a, b, dgamma, dbeta;
  };

  // backward for element type T, with (A) or without a fused activation, y found through ys.
  template <bool A, class T, bool Recompute>
  void backward_as(const std::vector<Part<T>>& parts, YSource<T, Recompute> ys, const Tensor& dy, Channels& ch,
                   int64_t m, int64_t W) {
    // part[c] = sum dy, part[W + c] = sum dy * (x - mean)
    const double* part = reduce_dy_dyxmu<A>(parts, dy.as<T>(), dy.row_stride(), ys, act_, ch.mean.data(), m, W);
    std::vector<float> pa(W), qa(W), ra(W);
    ch.dgamma.resize(size_t(W));
    ch.dbeta.resize(size_t(W));
    for (int64_t c = 0; c < W; ++c) {
      // dx = g*is * (dy - db/m - xhat*dg/m), xhat = (x - mean)*is  =>  dx = p*dy + q*(x - mean) + r
      const bn::GradCoef k = bn::grad_coef(part[c], part[W + c], ch.invstd[c], ch.gamma[c], double(m));
      ch.dbeta[c] = k.dbeta;
      ch.dgamma[c] = k.dgamma;
      pa[c] = k.dx.p;
      qa[c] = k.dx.q;
      ra[c] = k.dx.r;
    }
    if (std::any_of(parts.begin(), parts.end(), [](const Part<T>& p) { return p.dx; }))
      apply_dx<A>(parts, dy.as<T>(), dy.row_stride(), ys, act_, ch.mean.data(), pa.data(), qa.data(), ra.data(), m, W);
  }
  Clamp act_;        // the fused activation's bounds
  Clamp gate_bf16_;  // its gate on the value before a bf16 store (act::rounded_gate)
  // The last training forward's coefficients y = x·a + b (with a fused activation), for its
  // backward; fwd_mean_ names the saved statistics they go with (nullptr: none kept).
  std::vector<float> fwd_a_, fwd_b_;
  const void* fwd_mean_ = nullptr;
  int64_t fwd_rows_ = 0;
  DType fwd_type_ = DType::F32;  // the gate depends on the type stored
};

static RegisterKernel<BatchNormKernel, CpuBatchNorm> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
