// CPU attention on bf16 tensors (the layer computing in bf16) against attention on their f32 values (its slow path) on random cases, 1-4 threads: the same bits after one rounding; and its attn_bf16 products (bf16 dot products) against float64.
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
#include "core/ops/cpu/cpu_attention_gemm.h"
#include "reference_transformer.h"
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
    // attn_bf16 (rounded probabilities, bf16 dot products) off: it has its own test below.
    const FastPaths fast = std::bernoulli_distribution(0.75)(rng) ? FastPaths::all().with(FastPath::AttnBf16, false)
                                                                  : FastPaths::none();
    const int t_low = fz::threads(rng), t_f32 = fz::threads(rng);
    INFO("case " << i << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", Dk " << Dk << ", Dv " << Dv
                 << (causal ? ", causal" : "") << ", dropout " << rate << ", fast paths "
                 << (fast.bits() == FastPaths::none().bits() ? "none" : "all but attn_bf16") << ", threads " << t_low << " (bf16) and "
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

// attn_bf16: the bf16 attention's products as AVX512_BF16 dot products of bf16 pairs, the
// probabilities and score gradients rounded to bf16 where they multiply (q, k, v and dout are bf16
// already), f32 accumulation. Against float64 (its backward's D_i from the kernel's stored o, as
// the kernel's) within cuDNN's bound for the same roundings, 4·(u·scale·max Σ|q·k| + u), plus the
// output's rounding u (u = 2^-8, each of the output's scale: ref::attention_errors); the same bits
// at two thread counts (each (batch, head) is one thread's); and the path taken (the products
// differ from the widened path's on some output, or the case is too small to tell).
TEST_CASE("fast path attn_bf16: attention's products as bf16 dot products with rounded probabilities, against float64 within the rounded-operand bound, random shapes, dropout, 1-4 threads", "[fuzz]") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  if (!cpu::attn_bf16_available()) TRAINER_SKIP(CpuFeature, "attn_bf16 needs AVX512_BF16, which this CPU lacks");
  fz::Budget budget(60);
  fz::Tally tally{"attn_bf16 (bf16 dot products, probabilities and score gradients rounded)"};
  int64_t differed = 0, compared = 0;
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 17);
    const int64_t B = uniform_int(rng, 1, 3), T = uniform_int(rng, 1, 140), H = uniform_int(rng, 1, 4);
    const bool causal = std::bernoulli_distribution(0.6)(rng);
    const int64_t S = std::bernoulli_distribution(0.7)(rng) ? T : uniform_int(rng, 1, 140);
    const int64_t Dk = uniform_int(rng, 1, 48), Dv = std::bernoulli_distribution(0.5)(rng) ? Dk : uniform_int(rng, 1, 48);
    const float rate = std::bernoulli_distribution(0.25)(rng) ? 0.3f : 0.0f;
    const int t1 = fz::threads(rng), t2 = fz::threads(rng);
    INFO("case " << i << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", Dk " << Dk << ", Dv " << Dv
                 << (causal ? ", causal" : "") << ", dropout " << rate << ", threads " << t1 << " and " << t2 << "; "
                 << budget.repro(i));
    const Shape qs{B, T, H * Dk}, ks{B, S, H * Dk}, vs{B, S, H * Dv}, os{B, T, H * Dv};
    const ref::Vec vq = b16::random_values(qs, rng, DType::BF16, -2, 2), vk = b16::random_values(ks, rng, DType::BF16, -2, 2);
    const ref::Vec vv = b16::random_values(vs, rng, DType::BF16), vg = b16::random_values(os, rng, DType::BF16);
    const DropoutSeed drop{rng(), nullptr};
    const DropoutSeed* dp = rate > 0 ? &drop : nullptr;
    auto outputs = [&](int threads, FastPaths fast) {
      OpContext& c = fz::cpu_context_for(threads, Precision::BF16, fast);
      auto k = make_kernel<AttentionKernel>(c, AttentionParams{H, Dk, Dv, causal, rate});
      const Outputs r = run(*k, b16::make(qs, DType::BF16, vq), b16::make(ks, DType::BF16, vk),
                            b16::make(vs, DType::BF16, vv), b16::make(os, DType::BF16, vg), H, dp, Tensor());
      return std::vector<ref::Vec>{b16::values(r.o), b16::values(r.dq), b16::values(r.dk), b16::values(r.dv)};
    };
    const std::vector<ref::Vec> got = outputs(t1, FastPaths::all());
    CHECK(outputs(t2, FastPaths::all()) == got);
    ++compared;
    differed += outputs(t1, FastPaths::all().with(FastPath::AttnBf16, false)) != got;
    const ref::Vec mask = ref::attention_dropout_mask(size_t(B * H * T * S), rate, drop.value);
    std::vector<ref::Vec> want(4);
    want[0] = ref::attention_forward(vq, vk, vv, B, T, S, H, Dk, Dv, causal, rate > 0 ? &mask : nullptr);
    ref::attention_backward(vq, vk, vv, vg, B, T, S, H, Dk, Dv, causal, want[1], want[2], want[3],
                            rate > 0 ? &mask : nullptr, &got[0]);
    const std::vector<double> errs = ref::attention_errors(got, want, vq, vk, vv, vg, Dk, rate);
    const double u = 0x1p-8, qk = ref::attention_largest_qk(vq, vk, B, T, S, H, Dk);
    const double bound = 4 * (u * qk / std::sqrt(double(Dk)) + u) + u;
    double worst = 0;
    for (int t = 0; t < 4; ++t) {
      INFO("output " << t << " (o, dq, dk, dv): error " << errs[size_t(t)] << " of its scale, bound " << bound);
      CHECK(errs[size_t(t)] <= bound);
      worst = std::max(worst, errs[size_t(t)] / bound);
    }
    tally.wide(t1, worst, "case " + std::to_string(i));
  }
  INFO(differed << " of " << compared << " cases differ from the widened path's products");
  CHECK(differed * 2 > compared);  // the path ran: rounded probabilities move most results
  tally.report(budget);
}
