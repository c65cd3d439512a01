// CUDA batchnorm: own NHWC kernels in f32, bf16 or f16 (fp32 statistics, fixed-order reductions), the normalisation fused with a following ReLU/ReLU6.
#include <cmath>

#include "core/ops/batchnorm.h"
#include "core/ops/math/batchnorm_math.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"

// x is [m, C] with C last (NHWC, or any rank: statistics per last-axis channel over every other
// axis), the cpu_batchnorm.cpp algorithm and formulas (their arithmetic is batchnorm_math.h's,
// shared with the CPU and tested on the host; what stays here is launch geometry and loads/stores):
//   forward_train  1. per-channel sums of d = x - x[0, c] and d^2 (shifting by the first row keeps
//                     the one-pass variance accurate when |mean| >> std), in double, in the fixed
//                     order of cuda_reduce.cuh; the finish pass computes mean, 1/sqrt(var + eps)
//                     (biased variance), the running statistics (momentum; the biased batch
//                     variance, or with unbiased_moving_variance the unbiased one, 0 for one
//                     row) and the affine coefficients a = g·is, b = beta - mean·a;
//                  2. y = act(x·a + b), act a clamp ([0, inf) relu, [0, 6] relu6) or nothing.
//   forward_infer  a, b from the running statistics, then pass 2.
//   backward       1. per-channel sums of g = act'(y)·dy and g·(x - mean); the finish pass writes
//                     dbeta = Σg, dgamma = is·Σg(x - mean), and the coefficients of
//                  2. dx = P·g + Q·(x - mean) + R, P = gamma·is, Q = -P·is²·Σg(x-mean)/m, R = -P·Σg/m.
// One read of x for the statistics and one read plus one write to normalise: against the CPU's
// cuDNN-based predecessor (legacy BN API, 3.7 ms forward + 5.6 ms backward for conv1's
// 256x32x32x96 batch norm on an H100, plus a separate ReLU pass) these read each tensor at most
// twice and fold the activation in. bf16/f16 tensors are loaded into float and rounded once on
// store; the [C] parameters and statistics are f32. Everything is deterministic (no atomics).

namespace trainer {
namespace {

constexpr const char* kOp = "batchnorm";

using bn::act_clamp;
using bn::act_through;

// The fused activation as a compile-time clamp (bn::act_clamp): 0 none, 1 relu, 2 relu6.
int act_code(ActKind k) { return k == ActKind::Relu ? 1 : k == ActKind::Relu6 ? 2 : 0; }

// Calls f(std::integral_constant<int, A>) for the activation code a.
template <class F>
void with_act(int a, F&& f) {
  if (a == 1) f(std::integral_constant<int, 1>{});
  else if (a == 2) f(std::integral_constant<int, 2>{});
  else f(std::integral_constant<int, 0>{});
}

// --- Reduction terms (cuda_reduce.cuh functors) -------------------------------------------------

// bn::centred_terms of x - shift (shift: a [C] vector, the first row of x when `first_row`, or 0).
template <class T>
struct CentredTerms {
  const T* x;
  const float* shift;
  int64_t C;
  bool first_row;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, double (&a)[2]) const {
    const float s = first_row ? cuda::to_f32(x[c]) : (shift ? shift[c] : 0.0f);
    bn::centred_terms(cuda::to_f32(x[r * C + c]), s, a);
  }
};

// bn::grad_terms of g = act'(y)·dy.
template <class T, int A>
struct GradTerms {
  const T *x, *dy, *y;
  const float* mean;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, double (&a)[2]) const {
    const int64_t i = r * C + c;
    float g = cuda::to_f32(dy[i]);
    if constexpr (A != 0) g = act_through<A>(g, cuda::to_f32(y[i]));
    bn::grad_terms(g, cuda::to_f32(x[i]), mean[c], a);
  }
};

// --- Finish passes (epilogues) ------------------------------------------------------------------

struct TrainStats {  // forward_train: statistics, running statistics, coef = [a | b]
  const float *x0, *gamma, *beta;  // x0: the first row of x (the sums' shift), widened to f32
  float *mean, *invstd, *rm, *rv, *coef;
  double m, eps, mom;
  int64_t C;
  bool unbiased;  // BatchNormParams::unbiased_moving_variance
  __device__ void operator()(int64_t c, const double (&s)[2]) const {
    const bn::TrainStats st = bn::train_stats(s[0], s[1], m, x0[c], gamma ? double(gamma[c]) : 1.0,
                                              beta ? double(beta[c]) : 0.0, eps, mom, rm[c], rv[c], unbiased);
    mean[c] = st.mean;
    invstd[c] = st.invstd;
    coef[c] = st.a;
    coef[C + c] = st.b;
    rm[c] = st.running_mean;
    rv[c] = st.running_var;
  }
};

struct GradCoef {  // backward: dbeta, dgamma, coef = [P | Q | R]
  const float *gamma, *invstd;
  float *dgamma, *dbeta, *coef;
  double m;
  int64_t C;
  __device__ void operator()(int64_t c, const double (&s)[2]) const {
    const bn::GradCoef k = bn::grad_coef(s[0], s[1], invstd[c], gamma ? double(gamma[c]) : 1.0, m);
    if (dbeta) dbeta[c] = k.dbeta;
    if (dgamma) dgamma[c] = k.dgamma;
    coef[c] = k.dx.p;
    coef[C + c] = k.dx.q;
    coef[2 * C + c] = k.dx.r;
  }
};

struct StorePair {  // the sync pieces: the two sums as f32
  float *s, *q;
  __device__ void operator()(int64_t c, const double (&v)[2]) const {
    s[c] = float(v[0]);
    q[c] = float(v[1]);
  }
};

// --- Element-wise passes ------------------------------------------------------------------------

struct InvSqrt {  // 1/sqrt(eps) for every channel of an empty batch (the argument is ignored)
  float eps;
  __device__ float operator()(float) const { return bn::empty_invstd(eps); }
};

// The first row of x widened to f32 (the shift of forward_train's sums).
template <class T>
__global__ void first_row_kernel(const T* __restrict__ x, float* __restrict__ out, int64_t C) {
  CUDA_GRID_LOOP(c, C) out[c] = cuda::to_f32(x[c]);
}

__global__ void infer_coef_kernel(const float* __restrict__ gamma, const float* __restrict__ beta,
                                  const float* __restrict__ rm, const float* __restrict__ rv, double eps, int64_t C,
                                  float* __restrict__ coef) {
  CUDA_GRID_LOOP(c, C) {
    const bn::Affine af =
        bn::infer_affine(gamma ? double(gamma[c]) : 1.0, beta ? double(beta[c]) : 0.0, rm[c], rv[c], eps);
    coef[c] = af.a;
    coef[C + c] = af.b;
  }
}

// --- Synchronised batch norm's finishes (bn::sync_*), count[0] the rows of every replica's batch.

__global__ void sync_count_kernel(float* __restrict__ count, float m) { count[0] = m; }

__global__ void sync_mean_kernel(const float* __restrict__ sum, const float* __restrict__ count,
                                 float* __restrict__ mean, int64_t C) {
  CUDA_GRID_LOOP(c, C) mean[c] = bn::sync_mean(sum[c], count[0]);
}

__global__ void sync_stats_kernel(const float* __restrict__ sum, const float* __restrict__ sumsq,
                                  const float* __restrict__ count, float* __restrict__ mean,
                                  float* __restrict__ invstd, float* __restrict__ var, float* __restrict__ rm,
                                  float* __restrict__ rv, double eps, double mom, bool unbiased, int64_t C) {
  CUDA_GRID_LOOP(c, C) {
    const bn::SyncStats st = bn::sync_stats(sum[c], sumsq[c], count[0], mean[c], eps, mom, rm[c], rv[c], unbiased);
    mean[c] = st.mean;
    invstd[c] = st.invstd;
    var[c] = st.var;
    rm[c] = st.running_mean;
    rv[c] = st.running_var;
  }
}

__global__ void sync_param_grads_kernel(const float* __restrict__ sum_dy, const float* __restrict__ sum_dy_xmu,
                                        const float* __restrict__ invstd, float* __restrict__ dgamma,
                                        float* __restrict__ dbeta, int64_t C) {
  CUDA_GRID_LOOP(c, C) {
    const bn::ParamGrads g = bn::sync_param_grads(sum_dy[c], sum_dy_xmu[c], invstd[c]);
    if (dgamma) dgamma[c] = g.dgamma;
    if (dbeta) dbeta[c] = g.dbeta;
  }
}

__global__ void sync_coef_kernel(const float* __restrict__ gamma, const float* __restrict__ invstd,
                                 const float* __restrict__ sum_dy, const float* __restrict__ sum_dy_xmu,
                                 const float* __restrict__ count, int64_t C, float* __restrict__ coef) {
  CUDA_GRID_LOOP(c, C) {
    const bn::InputGrad k =
        bn::apply_coef(gamma ? double(gamma[c]) : 1.0, invstd[c], sum_dy[c], sum_dy_xmu[c], double(count[0]));
    coef[c] = k.p;
    coef[C + c] = k.q;
    coef[2 * C + c] = k.r;
  }
}

// y = act(x·a[c] + b[c]) over n = m·C elements; kVec<T> per thread when vec (C a multiple of it,
// pointers 16-byte aligned), so a pack's channels are consecutive.
template <class T, int A>
__global__ void affine_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ coef, int64_t n,
                              int64_t C, bool vec) {
  if (vec) {
    constexpr int V = cuda::kVec<T>;
    CUDA_GRID_LOOP(p, n / V) {
      const int64_t c0 = (p * V) % C;
      float v[V];
      cuda::load_pack(x + p * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = act_clamp<A>(bn::normalise(v[j], coef[c0 + j], coef[C + c0 + j]));
      cuda::store_pack(y + p * V, v);
    }
  } else {
    CUDA_GRID_LOOP(i, n) {
      const int64_t c = i % C;
      y[i] = cuda::from_f32<T>(act_clamp<A>(bn::normalise(cuda::to_f32(x[i]), coef[c], coef[C + c])));
    }
  }
}

// dx = P[c]·g + Q[c]·(x - mean[c]) + R[c], g = act'(y)·dy (y read only when A).
template <class T, int A>
__global__ void dx_kernel(const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ y,
                          const float* __restrict__ mean, const float* __restrict__ coef, T* __restrict__ dx,
                          int64_t n, int64_t C, bool vec) {
  if (vec) {
    constexpr int V = cuda::kVec<T>;
    CUDA_GRID_LOOP(p, n / V) {
      const int64_t c0 = (p * V) % C;
      float xv[V], gv[V], yv[V];
      cuda::load_pack(x + p * V, xv);
      cuda::load_pack(dy + p * V, gv);
      if constexpr (A != 0) cuda::load_pack(y + p * V, yv);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t c = c0 + j;
        float g = gv[j];
        if constexpr (A != 0) g = act_through<A>(g, yv[j]);
        xv[j] = bn::input_grad(g, xv[j], mean[c], coef[c], coef[C + c], coef[2 * C + c]);
      }
      cuda::store_pack(dx + p * V, xv);
    }
  } else {
    CUDA_GRID_LOOP(i, n) {
      const int64_t c = i % C;
      float g = cuda::to_f32(dy[i]);
      if constexpr (A != 0) g = act_through<A>(g, cuda::to_f32(y[i]));
      dx[i] = cuda::from_f32<T>(bn::input_grad(g, cuda::to_f32(x[i]), mean[c], coef[c], coef[C + c], coef[2 * C + c]));
    }
  }
}

class CudaBatchNorm final : public BatchNormKernel {
 public:
  CudaBatchNorm(OpContext& ctx, const BatchNormParams& p)
      : BatchNormKernel(ctx, p), c_(cuda_context(ctx)), act_(act_code(p.activation)) {}

 private:
  void forward_train_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean, Tensor& running_var) override {
    if (C == 0) return;
    if (m == 0) {  // no samples: no statistics; leave the running statistics alone
      c_.fill_zero(save_mean.data(), save_mean.bytes());
      cuda::tmap1(c_, save_mean.f32(), save_invstd.f32(), C, InvSqrt{p_.epsilon});
      return;
    }
    float* coef = scratch(3 * C);  // [a | b], then the first row at 2C
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = cuda::ptr<const T>(x);
      TRAINER_LAUNCH(first_row_kernel<T>, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), xp, coef + 2 * C, C);
      sums_.run<2>(c_, m, C, CentredTerms<T>{xp, nullptr, C, true},
                   TrainStats{coef + 2 * C, opt(gamma), opt(beta), save_mean.f32(), save_invstd.f32(),
                              running_mean.f32(), running_var.f32(), coef, double(m), double(p_.epsilon),
                              double(p_.momentum), C, p_.unbiased_moving_variance});
      affine<T>(xp, cuda::ptr<T>(y), coef, m * C, C);
    });
  }

  void forward_infer_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& running_mean, const Tensor& running_var, Tensor& y) override {
    if (m == 0 || C == 0) return;
    float* coef = scratch(2 * C);
    TRAINER_LAUNCH(infer_coef_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), opt(gamma), opt(beta),
                   running_mean.f32(), running_var.f32(), double(p_.epsilon), C, coef);
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      affine<T>(cuda::ptr<const T>(x), cuda::ptr<T>(y), coef, m * C, C);
    });
  }

  void backward_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& dy,
                     const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
                     Tensor& dbeta) override {
    if (C == 0) return;
    if (m == 0) {
      if (dgamma.defined()) c_.fill_zero(dgamma.data(), dgamma.bytes());
      if (dbeta.defined()) c_.fill_zero(dbeta.data(), dbeta.bytes());
      return;
    }
    float* coef = scratch(3 * C);
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      with_act(act_, [&](auto a) {
        constexpr int A = decltype(a)::value;
        const T* xp = cuda::ptr<const T>(x);
        const T* gp = cuda::ptr<const T>(dy);
        const T* yp = A ? cuda::ptr<const T>(y) : nullptr;
        sums_.run<2>(c_, m, C, GradTerms<T, A>{xp, gp, yp, save_mean.f32(), C},
                     GradCoef{opt(gamma), save_invstd.f32(), opt(dgamma), opt(dbeta), coef, double(m), C});
        if (dx.defined()) input_grad<T, A>(xp, gp, yp, save_mean.f32(), coef, cuda::ptr<T>(dx), m * C, C);
      });
    });
  }

  // --- Synchronised batch norm pieces (batchnorm.h): no fused activation.

  void channel_sums_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& shift, Tensor& sum,
                         Tensor& sumsq) override {
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      sums_.run<2>(c_, m, C, CentredTerms<T>{cuda::ptr<const T>(x), opt(shift), C, false},
                   StorePair{sum.f32(), sumsq.f32()});
    });
  }

  void backward_sums_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& mean, Tensor& sum_dy,
                          Tensor& sum_dy_xmu) override {
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      sums_.run<2>(c_, m, C, GradTerms<T, 0>{cuda::ptr<const T>(x), cuda::ptr<const T>(dy), nullptr, mean.f32(), C},
                   StorePair{sum_dy.f32(), sum_dy_xmu.f32()});
    });
  }

  void sync_count_impl(int64_t m, Tensor& count) override {
    TRAINER_LAUNCH(sync_count_kernel, 1, 1, c_.stream(), count.f32(), float(m));
  }

  void sync_mean_impl(int64_t C, const Tensor& sum, const Tensor& count, Tensor& mean) override {
    if (C == 0) return;
    TRAINER_LAUNCH(sync_mean_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), sum.f32(), count.f32(),
                   mean.f32(), C);
  }

  void sync_stats_impl(int64_t C, const Tensor& sum, const Tensor& sumsq, const Tensor& count, Tensor& mean,
                       Tensor& save_invstd, Tensor& var, Tensor& running_mean, Tensor& running_var) override {
    if (C == 0) return;
    TRAINER_LAUNCH(sync_stats_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), sum.f32(), sumsq.f32(),
                   count.f32(), mean.f32(), save_invstd.f32(), var.f32(), running_mean.f32(), running_var.f32(),
                   double(p_.epsilon), double(p_.momentum), p_.unbiased_moving_variance, C);
  }

  void sync_param_grads_impl(int64_t C, const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& invstd,
                             Tensor& dgamma, Tensor& dbeta) override {
    if (C == 0) return;
    TRAINER_LAUNCH(sync_param_grads_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), sum_dy.f32(),
                   sum_dy_xmu.f32(), invstd.f32(), opt(dgamma), opt(dbeta), C);
  }

  void backward_apply_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& invstd, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                           const Tensor& count, Tensor& dx) override {
    if (m == 0 || C == 0) return;
    float* coef = scratch(3 * C);
    TRAINER_LAUNCH(sync_coef_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), opt(gamma), invstd.f32(),
                   sum_dy.f32(), sum_dy_xmu.f32(), count.f32(), C, coef);
    cuda::dispatch_float(kOp, "x", x, [&](auto tag) {
      using T = decltype(tag);
      input_grad<T, 0>(cuda::ptr<const T>(x), cuda::ptr<const T>(dy), nullptr, mean.f32(), coef, cuda::ptr<T>(dx),
                       m * C, C);
    });
  }

  template <class T>
  void affine(const T* x, T* y, const float* coef, int64_t n, int64_t C) {
    const bool vec = C % cuda::kVec<T> == 0 && cuda::aligned16(x) && cuda::aligned16(y);
    const int64_t items = vec ? n / cuda::kVec<T> : n;
    with_act(act_, [&](auto a) {
      TRAINER_LAUNCH((affine_kernel<T, decltype(a)::value>), cuda::grid_for(items, c_), cuda::kBlock, c_.stream(), x,
                     y, coef, n, C, vec);
    });
  }

  template <class T, int A>
  void input_grad(const T* x, const T* dy, const T* y, const float* mean, const float* coef, T* dx, int64_t n,
                  int64_t C) {
    const bool vec = C % cuda::kVec<T> == 0 && cuda::aligned16(x) && cuda::aligned16(dy) && cuda::aligned16(dx) &&
                     (A == 0 || cuda::aligned16(y));
    const int64_t items = vec ? n / cuda::kVec<T> : n;
    TRAINER_LAUNCH((dx_kernel<T, A>), cuda::grid_for(items, c_), cuda::kBlock, c_.stream(), x, dy, y, mean, coef, dx, n,
                   C, vec);
  }

  static float* opt(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }

  // The per-channel coefficients' buffer (grown on demand; a fixed shape allocates nothing after
  // its first call).
  float* scratch(int64_t n) {
    return coef_.as<float>(c_, size_t(n));
  }

  CudaContext& c_;
  int act_;  // the fused activation (act_code)
  cuda::ColumnReducer sums_;
  Scratch coef_;
};

static RegisterKernel<BatchNormKernel, CudaBatchNorm> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
