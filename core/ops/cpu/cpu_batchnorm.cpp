// CPU batchnorm: statistics, normalisation (fused ReLU/ReLU6) and gradients over f32 or bf16 [rows, C]; y, dy may be strided.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "core/ops/batchnorm.h"
#include "core/ops/cpu/cpu_batchnorm_rows.h"
#include "core/ops/cpu/cpu_context.h"

namespace trainer {
namespace {

using namespace cpu_bn;

class CpuBatchNorm final : public BatchNormKernel {
 public:
  CpuBatchNorm(OpContext& ctx, const BatchNormParams& p)
      : BatchNormKernel(ctx, p),
        act_(act::clamp_of(p.activation)),
        gate_bf16_(act::rounded_gate(act_, [](float v) { return cpu::to_f32(cpu::round_bf16(v)); })),
        fast_(ctx.fast_paths()) {}
  // Fast paths (FastPaths): y and dy as a concat's channel slices (slices; else the concat copies),
  // sibling batch norms in one pass (bn_siblings), the fused activation's gate decided from x in
  // backward (bn_gate; else y is read).
  bool strided_rows() const override { return fast_.has(FastPath::Slices); }
  bool joins_siblings() const override { return fast_.has(FastPath::BnSiblings); }

 private:
  void forward_train_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                          Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean, Tensor& running_var) override {
    forward_parts(m, C, true, y,
                  {SiblingForward{this, &x, &gamma, &beta, &save_mean, &save_invstd, &running_mean, &running_var}});
  }
  void forward_infer_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& running_mean, const Tensor& running_var, Tensor& y) override {
    // Inference only reads the running statistics.
    forward_parts(m, C, false, y,
                  {SiblingForward{this, &x, &gamma, &beta, nullptr, nullptr, const_cast<Tensor*>(&running_mean),
                                  const_cast<Tensor*>(&running_var)}});
  }
  void forward_siblings_impl(int64_t m, int64_t W, bool training, Tensor& y,
                             const std::vector<SiblingForward>& parts) override {
    forward_parts(m, W, training, y, parts);
  }

  // forward of one batch norm or of siblings (batchnorm.h), over the W channels of y's rows: with
  // the batch's statistics (training: saved, the running ones updated, each part's coefficients
  // kept by its kernel for backward's activation gate) or the running ones.
  void forward_parts(int64_t m, int64_t W, bool training, Tensor& y, const std::vector<SiblingForward>& sibs) {
    cpu::refuse_f16(kName, "x", *sibs[0].x);
    if (W == 0) return;
    std::vector<CpuBatchNorm*> ks;
    for (const SiblingForward& s : sibs) {
      ks.push_back(dynamic_cast<CpuBatchNorm*>(s.kernel));
      if (!ks.back()) throw std::logic_error("batchnorm: a sibling's kernel is not the CPU's");
      if (training) ks.back()->fwd_mean_ = nullptr;  // no coefficients kept until this pass has made them
    }
    if (m == 0) {  // no samples: no statistics; leave the running statistics alone
      for (size_t q = 0; training && q < sibs.size(); ++q) {
        Tensor &mean = *sibs[q].save_mean, &invstd = *sibs[q].save_invstd;
        std::fill(mean.f32(), mean.f32() + mean.numel(), 0.0f);
        std::fill(invstd.f32(), invstd.f32() + invstd.numel(), bn::empty_invstd(ks[q]->p_.epsilon));
      }
      return;
    }
    cpu::dispatch_float("batchnorm", "x", *sibs[0].x, [&](auto t) {
      using T = decltype(t);
      std::vector<Part<T>> parts;
      int64_t at = 0;
      for (const SiblingForward& s : sibs) {
        parts.push_back({s.x->as<T>(), nullptr, s.x->shape().back(), at});
        at += parts.back().C;
      }
      // Shifting by the first row keeps the one-pass variance accurate when |mean| >> std.
      std::vector<float> shift(W), a(W), b(W);
      const double* sums = nullptr;
      if (training) {
        for (const Part<T>& p : parts)
          for (int64_t c = 0; c < p.C; ++c) shift[size_t(p.at + c)] = cpu::to_f32(p.x[c]);
        sums = reduce_centred(parts, shift.data(), m, W);
      }
      for (size_t q = 0; q < sibs.size(); ++q) {
        const SiblingForward& s = sibs[q];
        const BatchNormParams& pp = ks[q]->p_;
        float *rm = s.running_mean->f32(), *rv = s.running_var->f32();
        for (int64_t c = 0, k = parts[q].at; c < parts[q].C; ++c, ++k) {
          const double g = s.gamma->defined() ? s.gamma->f32()[c] : 1.0;
          const double be = s.beta->defined() ? s.beta->f32()[c] : 0.0;
          if (!training) {
            const bn::Affine af = bn::infer_affine(g, be, rm[c], rv[c], double(pp.epsilon));
            a[size_t(k)] = af.a;
            b[size_t(k)] = af.b;
            continue;
          }
          const bn::TrainStats st = bn::train_stats(sums[k], sums[W + k], double(m), shift[size_t(k)], g, be,
                                                    double(pp.epsilon), double(pp.momentum), rm[c], rv[c],
                                                    pp.unbiased_moving_variance);
          s.save_mean->f32()[c] = st.mean;
          s.save_invstd->f32()[c] = st.invstd;
          a[size_t(k)] = st.a;
          b[size_t(k)] = st.b;
          rm[c] = st.running_mean;
          rv[c] = st.running_var;
        }
      }
      with_activation(p_.activation, [&](auto a_on) {
        affine_rows<decltype(a_on)::value>(parts, a.data(), b.data(), y.as<T>(), y.row_stride(), act_, m, W);
      });
      if (!training || p_.activation == ActKind::Linear) return;
      for (size_t q = 0; q < sibs.size(); ++q) {  // for backward's activation gate
        CpuBatchNorm& k = *ks[q];
        k.fwd_a_.assign(a.begin() + parts[q].at, a.begin() + parts[q].at + parts[q].C);
        k.fwd_b_.assign(b.begin() + parts[q].at, b.begin() + parts[q].at + parts[q].C);
        k.fwd_mean_ = sibs[q].save_mean->data();
        k.fwd_rows_ = m;
        k.fwd_type_ = sibs[q].x->dtype();
      }
    });
  }

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
    bool kept = p_.activation != ActKind::Linear && fast_.has(FastPath::BnGate);
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
      return reduce_centred(std::vector<Part<T>>{{x.as<T>(), nullptr, C, 0}}, sh, m, C);
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

  void sync_count_impl(int64_t m, Tensor& count) override { count.f32()[0] = float(m); }

  void sync_mean_impl(int64_t C, const Tensor& sum, const Tensor& count, Tensor& mean) override {
    for (int64_t c = 0; c < C; ++c) mean.f32()[c] = bn::sync_mean(sum.f32()[c], count.f32()[0]);
  }

  void sync_stats_impl(int64_t C, const Tensor& sum, const Tensor& sumsq, const Tensor& count, Tensor& mean,
                       Tensor& save_invstd, Tensor& var, Tensor& running_mean, Tensor& running_var) override {
    for (int64_t c = 0; c < C; ++c) {
      const bn::SyncStats st =
          bn::sync_stats(sum.f32()[c], sumsq.f32()[c], count.f32()[0], mean.f32()[c], double(p_.epsilon),
                         double(p_.momentum), running_mean.f32()[c], running_var.f32()[c], p_.unbiased_moving_variance);
      mean.f32()[c] = st.mean;
      save_invstd.f32()[c] = st.invstd;
      var.f32()[c] = st.var;
      running_mean.f32()[c] = st.running_mean;
      running_var.f32()[c] = st.running_var;
    }
  }

  void sync_param_grads_impl(int64_t C, const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& invstd,
                             Tensor& dgamma, Tensor& dbeta) override {
    for (int64_t c = 0; c < C; ++c) {
      const bn::ParamGrads g = bn::sync_param_grads(sum_dy.f32()[c], sum_dy_xmu.f32()[c], invstd.f32()[c]);
      if (dgamma.defined()) dgamma.f32()[c] = g.dgamma;
      if (dbeta.defined()) dbeta.f32()[c] = g.dbeta;
    }
  }

  void backward_apply_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& invstd, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                           const Tensor& count_t, Tensor& dx) override {
    cpu::refuse_f16(kName, "x", x);
    if (m == 0 || C == 0) return;
    const double count = count_t.f32()[0];
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
  FastPaths fast_;   // the context's, when this kernel was made
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
