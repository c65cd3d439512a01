// CPU attention on bf16 tensors (the layer computing in bf16) against attention on their f32 values (its slow path) on random cases, 1-4 threads: the same bits after one rounding.
//
// The bf16 path widens q, k, v and dout into the same f32 scratch the f32 path copies them into,
// runs the same f32 arithmetic, and rounds o, dq, dk and dv once where it stores them. So on any
// values, at any thread counts (each (batch, head) is one thread's):
//   o_bf16 = bf16(o_f32), lse_bf16 = lse_f32 (f32 in both), and backward given the bf16 o (widened
//   for the f32 path): dq, dk, dv_bf16 = bf16(dq, dk, dv_f32).
// A value written unrounded, a scratch row of another head, an accumulation in bf16 or a dropped
// block shows as a difference. Values as training has them: q and k over a few binades (scores up
// to ~±100: near one-hot rows), v and dout over many, with runs of exact zeros.
#include <cmath>

#include "../cpu_bf16.h"
#include "core/ops/attention.h"
#include "fastpath_fuzz.h"
#include "skip.h"

using namespace trainer;
using namespace trainer::test;
namespace fz = trainer::test::fuzz;
namespace b16 = trainer::test::bf16_check;

namespace {

struct Outputs {
  Tensor o, lse, dq, dk, dv;
};

// One forward and backward of `k` (outputs start as NaN); backward is given `o_for_backward` when
// defined (the bf16 path's o, widened), else the forward's own o.
Outputs run(AttentionKernel& k, const Tensor& q, const Tensor& kk, const Tensor& v, const Tensor& g, int64_t H,
            const DropoutSeed* drop, const Tensor& o_for_backward) {
  const DType t = q.dtype();
  Outputs r{b16::nan_of(g.shape(), t), b16::nan_of({q.dim(0), H, q.dim(1)}, DType::F32), b16::nan_of(q.shape(), t),
            b16::nan_of(kk.shape(), t), b16::nan_of(v.shape(), t)};
  k.forward(q, kk, v, r.o, r.lse, drop);
  k.backward(q, kk, v, o_for_backward.defined() ? o_for_backward : r.o, r.lse, g, r.dq, r.dk, r.dv, drop);
  return r;
}

// The largest |bf16 result - bf16(f32 result)| (0 when every element is the rounded f32 one).
double rounded_diff(const Tensor& low, const Tensor& f32) {
  ref::Vec r = b16::values(f32);
  for (double& e : r) e = b16::round_bf16(e);
  return fz::max_diff(b16::values(low), r);
}

}  // namespace

TEST_CASE("fast path attention_bf16: attention on bf16 tensors equals attention on their f32 values rounded once, over random shapes, dropout and 1-4 threads", "[fuzz]") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  fz::Budget budget(150);
  fz::Tally tally{"attention_bf16 (bf16 q, k, v and gradients widened in place of f32 ones, outputs rounded)"};
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 11);
    const int64_t B = uniform_int(rng, 1, 6) == 1 ? 0 : uniform_int(rng, 1, 3), T = uniform_int(rng, 1, 140);
    const bool causal = std::bernoulli_distribution(0.6)(rng);
    const int64_t S = std::bernoulli_distribution(0.7)(rng) ? T : uniform_int(rng, 1, 140);
    const int64_t H = uniform_int(rng, 1, 4), Dk = uniform_int(rng, 1, 48);
    const int64_t Dv = std::bernoulli_distribution(0.5)(rng) ? Dk : uniform_int(rng, 1, 48);
    const float rate = std::bernoulli_distribution(0.25)(rng) ? 0.3f : 0.0f;
    const FastPaths fast = std::bernoulli_distribution(0.75)(rng) ? FastPaths::all() : FastPaths::none();
    const int t_low = fz::threads(rng), t_f32 = fz::threads(rng);
    INFO("case " << i << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", Dk " << Dk << ", Dv " << Dv
                 << (causal ? ", causal" : "") << ", dropout " << rate << ", fast paths "
                 << (fast.bits() == FastPaths::all().bits() ? "all" : "none") << ", threads " << t_low << " (bf16) and "
                 << t_f32 << " (f32); " << budget.repro(i));
    auto values = [&](int64_t n, int lo, int hi, bool gated) {
      return fz::wide_values(size_t(n), rng, DType::BF16, lo, hi, gated);
    };
    const ref::Vec vq = values(B * T * H * Dk, -6, 2, false), vk = values(B * S * H * Dk, -6, 2, false);
    const ref::Vec vv = values(B * S * H * Dv, -30, 6, true), vg = values(B * T * H * Dv, -30, 0, true);
    const Shape qs{B, T, H * Dk}, ks{B, S, H * Dk}, vs{B, S, H * Dv}, os{B, T, H * Dv};
    const DropoutSeed drop{rng(), nullptr};
    const DropoutSeed* dp = rate > 0 ? &drop : nullptr;

    OpContext& lc = fz::cpu_context_for(t_low, Precision::BF16, fast);
    auto kl = make_kernel<AttentionKernel>(lc, AttentionParams{H, Dk, Dv, causal, rate});
    const Outputs low = run(*kl, b16::make(qs, DType::BF16, vq), b16::make(ks, DType::BF16, vk),
                            b16::make(vs, DType::BF16, vv), b16::make(os, DType::BF16, vg), H, dp, Tensor());
    OpContext& fc = fz::cpu_context_for(t_f32, Precision::BF16, fast);
    auto kf = make_kernel<AttentionKernel>(fc, AttentionParams{H, Dk, Dv, causal, rate});
    const Outputs f32 = run(*kf, b16::make(qs, DType::F32, vq), b16::make(ks, DType::F32, vk),
                            b16::make(vs, DType::F32, vv), b16::make(os, DType::F32, vg), H, dp,
                            b16::make(os, DType::F32, b16::values(low.o)));
    double d = std::max({rounded_diff(low.o, f32.o), rounded_diff(low.dq, f32.dq), rounded_diff(low.dk, f32.dk),
                         rounded_diff(low.dv, f32.dv)});
    d = std::max(d, fz::max_diff(b16::values(low.lse), b16::values(f32.lse)));
    INFO("largest difference from the f32 path's rounded result: " << d);
    CHECK(d == 0);
    tally.exact(t_low, d);
  }
  tally.report(budget);
}
