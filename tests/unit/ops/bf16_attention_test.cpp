// Attention on low-precision tensors (bf16; f16 on GPUs), as the multi_head_attention layer runs it under mixed precision, on every backend: against float64 within each output's rounding, the same bits on every call, and its type rules.
#include <cmath>

#include "bf16_check.h"
#include "fastpath_fuzz.h"
#include "core/ops/attention.h"
#include "reference_transformer.h"

using namespace trainer;
using namespace trainer::test;

namespace {

namespace b16 = trainer::test::bf16_check;
using b16::Low;

struct Case {
  int64_t B, T, S, H, Dk, Dv;
  bool causal;
  float rate = 0.0f;
};

// o, dq, dk, dv of one forward and backward on `ctx` (the low context, or on the CPU another of bf16), read back as values.
std::vector<ref::Vec> run(const Low& lo, OpContext& ctx, AttentionKernel& kern, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& g, const Case& c, const DropoutSeed* drop) {
  auto nan = [&](const Shape& s, DType t) { return Low::up(ctx, b16::nan_of(s, t)); };
  Tensor o = nan({c.B, c.T, c.H * c.Dv}, lo.type), lse = nan({c.B, c.H, c.T}, DType::F32);
  Tensor dq = nan(q.shape(), lo.type), dk = nan(k.shape(), lo.type), dv = nan(v.shape(), lo.type);
  kern.forward(q, k, v, o, lse, drop);
  kern.backward(q, k, v, o, lse, g, dq, dk, dv, drop);
  auto val = [&](const Tensor& t) { return b16::values(Low::down(ctx, t)); };
  return {val(o), val(dq), val(dk), val(dv)};
}

}  // namespace

// q, k in ±2 and v, dout in ±1, all values of the low type (so the reference sees the kernel's very
// inputs). Each output is stored once in the low type, from f32 accumulation. The probabilities and
// score gradients are rounded to the low type before their products — by cuDNN's fused kernel on a
// GPU (its shapes: one head width, a multiple of 8), by attn_bf16's dot products on the CPU — as
// attention_test's bound for cuDNN says (4·(u·scale·max Σ|q·k| + u)), plus the output's rounding
// (u of its scale). Without attn_bf16 the CPU's result is the f32 path's rounded once, bit for bit
// (fastpath_attention_test), so within the f32 bound plus u: kCpuTolerance + u, checked here too.
// The reference's backward takes D_i = do_i·o_i from the kernel's stored o, as the kernels do (the
// exact o would differ by o's rounding).
TEST_CASE("mixed precision: attention on low tensors matches float64 within each output's rounding, the same bits on every call", "[backends]") {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 1, false},     {2, 5, 5, 2, 3, 5, true},      {1, 7, 4, 3, 8, 2, false},
      {1, 4, 7, 2, 8, 8, true},      {3, 33, 33, 4, 16, 16, true},  {2, 70, 70, 2, 32, 32, false},
      {1, 150, 150, 1, 64, 64, true}, {2, 33, 33, 2, 16, 8, true, 0.2f}, {0, 5, 5, 2, 8, 8, true},
  };
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(4711);
    const double u = lo.u();
    for (const Case& c : cases) {
      INFO("B " << c.B << ", T " << c.T << ", S " << c.S << ", H " << c.H << ", Dk " << c.Dk << ", Dv " << c.Dv
                << (c.causal ? ", causal" : "") << ", dropout " << c.rate);
      const Shape qs{c.B, c.T, c.H * c.Dk}, ks{c.B, c.S, c.H * c.Dk}, vs{c.B, c.S, c.H * c.Dv}, os{c.B, c.T, c.H * c.Dv};
      const ref::Vec vq = b16::random_values(qs, rng, lo.type, -2, 2), vk = b16::random_values(ks, rng, lo.type, -2, 2);
      const ref::Vec vv = b16::random_values(vs, rng, lo.type), vg = b16::random_values(os, rng, lo.type);
      OpContext& ctx = lo.lctx();
      auto up = [&](const Shape& s, const ref::Vec& v) { return Low::up(ctx, b16::make(s, lo.type, v)); };
      const Tensor q = up(qs, vq), k = up(ks, vk), v = up(vs, vv), g = up(os, vg);
      const DropoutSeed drop{rng(), nullptr};
      // The CPU also without attn_bf16 (the products on the widened values).
      OpContext* widened = lo.be->is_cpu() ? &fuzz::cpu_context_for(2, Precision::BF16, FastPaths::defaults().with(
                                                                                           FastPath::AttnBf16, false))
                                           : nullptr;
      for (OpContext* kc : {&ctx, widened}) {
        if (!kc) continue;
        const bool tight = kc == widened;
        INFO((tight ? "without attn_bf16" : "default paths"));
        auto kern = make_kernel<AttentionKernel>(*kc, AttentionParams{c.H, c.Dk, c.Dv, c.causal, c.rate});
        const std::vector<ref::Vec> got = run(lo, *kc, *kern, q, k, v, g, c, c.rate > 0 ? &drop : nullptr);
        CHECK(run(lo, *kc, *kern, q, k, v, g, c, c.rate > 0 ? &drop : nullptr) == got);
        if (c.B == 0) {  // an empty batch: nothing to write, nothing to compare
          for (const ref::Vec& out : got) CHECK(out.empty());
          continue;
        }

        const ref::Vec mask = ref::attention_dropout_mask(size_t(c.B * c.H * c.T * c.S), c.rate, drop.value);
        const ref::Vec* m = c.rate > 0 ? &mask : nullptr;
        std::vector<ref::Vec> want(4);
        want[0] = ref::attention_forward(vq, vk, vv, c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal, m);
        ref::attention_backward(vq, vk, vv, vg, c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal, want[1], want[2], want[3],
                                m, &got[0]);
        const std::vector<double> errs = ref::attention_errors(got, want, vq, vk, vv, vg, c.Dk, c.rate);
        const double qk = ref::attention_largest_qk(vq, vk, c.B, c.T, c.S, c.H, c.Dk);
        const double bound = tight ? kCpuTolerance + u : 4 * (u * qk / std::sqrt(double(c.Dk)) + u) + u;
        for (int t = 0; t < 4; ++t) {
          INFO("output " << t << " (o, dq, dk, dv): error " << errs[size_t(t)] << " of its scale, bound " << bound);
          CHECK(errs[size_t(t)] <= bound);
        }
      }
    }
  }
}

TEST_CASE("mixed precision: attention takes all-f32 or all-low q, k, v, o and gradients, with an f32 log-sum-exp", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(4712);
    OpContext& ctx = lo.lctx();
    const DType F = DType::F32, L = lo.type;
    auto t = [&](DType dt) { return Low::up(ctx, b16::make({2, 3, 8}, dt, b16::random_values({2, 3, 8}, rng, dt))); };
    auto lse_of = [&](DType dt) { return Low::up(ctx, b16::nan_of({2, 2, 3}, dt)); };
    auto kern = make_kernel<AttentionKernel>(ctx, AttentionParams{2, 4, 4, true});
    for (DType a : {F, L}) {
      const DType b = a == F ? L : F;
      Tensor q = t(a), k = t(a), v = t(a), o = t(a), lse = lse_of(F), g = t(a), dq = t(a), dk = t(a), dv = t(a);
      Tensor qb = t(b), ob = t(b), lse_low = lse_of(L), gb = t(b), dqb = t(b), dkb = t(b), dvb = t(b);
      INFO("activations " << dtype_name(a));
      CHECK_THROWS_AS(kern->forward(q, qb, v, o, lse), std::invalid_argument);
      CHECK_THROWS_AS(kern->forward(q, k, qb, o, lse), std::invalid_argument);
      CHECK_THROWS_AS(kern->forward(q, k, v, ob, lse), std::invalid_argument);
      CHECK_THROWS_AS(kern->forward(q, k, v, o, lse_low), std::invalid_argument);
      REQUIRE_NOTHROW(kern->forward(q, k, v, o, lse));
      CHECK_THROWS_AS(kern->backward(q, k, v, o, lse, gb, dq, dk, dv), std::invalid_argument);
      CHECK_THROWS_AS(kern->backward(q, k, v, o, lse, g, dqb, dk, dv), std::invalid_argument);
      CHECK_THROWS_AS(kern->backward(q, k, v, o, lse, g, dq, dkb, dv), std::invalid_argument);
      CHECK_THROWS_AS(kern->backward(q, k, v, o, lse, g, dq, dk, dvb), std::invalid_argument);
      CHECK_THROWS_AS(kern->backward(q, k, v, ob, lse, g, dq, dk, dv), std::invalid_argument);
      REQUIRE_NOTHROW(kern->backward(q, k, v, o, lse, g, dq, dk, dv));
    }
    Tensor i32 = Low::up(ctx, Tensor::empty({2, 3, 8}, DType::I32)), o = t(L), lse = lse_of(F);
    CHECK_THROWS_AS(kern->forward(i32, i32, i32, o, lse), std::invalid_argument);
  }
}
