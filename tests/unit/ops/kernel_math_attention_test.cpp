// The CUDA attention's attn_gemm path on the host: its GEMM plan (attention_gemm.h) run through a column-major reference of cuBLAS's strided batched GEMM (every leading dimension and every element it touches checked), the rows kernels' arithmetic beside it, against float64 — chunked or not, either loop axis, f32 and bf16 operands.
#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "core/ops/math/attention_gemm.h"
#include "core/ops/math/attention_math.h"
#include "core/ops/math/half_bits.h"
#include "core/ops/math/philox.h"
#include "kernel_math_util.h"
#include "reference_transformer.h"

using namespace trainer;
using namespace trainer::test;
using attn_gemm::Buf;

namespace {

// The buffers by name, as floats (a bf16 operand is stored rounded: its values are bf16's).
struct Buffers {
  std::vector<float> at[12];
  std::vector<float>& operator[](Buf b) { return at[int(b)]; }
};

// One element of an operand: batch index e, column-major (row, col); every access inside the buffer.
float& element(Buffers& bufs, const attn_gemm::Operand& o, int64_t e, int64_t row, int64_t col) {
  std::vector<float>& v = bufs[o.buf];
  const int64_t i = o.offset + e * o.stride + row + col * o.ld;
  if (i < 0 || i >= int64_t(v.size())) throw std::out_of_range("a GEMM reads or writes outside its buffer");
  return v[size_t(i)];
}

// cuBLAS's strided batched GEMM, column-major, in double: C = alpha·op(A)·op(B) + beta·C.
void run_gemm(Buffers& bufs, const attn_gemm::Gemm& g) {
  REQUIRE(attn_gemm::valid(g));
  for (int64_t e = 0; e < g.batch; ++e)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const double a = g.ta ? element(bufs, g.a, e, l, i) : element(bufs, g.a, e, i, l);
          const double b = g.tb ? element(bufs, g.b, e, j, l) : element(bufs, g.b, e, l, j);
          s += a * b;
        }
        float& c = element(bufs, g.c, e, i, j);
        c = float(g.alpha * s + (g.beta != 0 ? g.beta * c : 0.0));
      }
}

float rounded(float v, bool bf16) { return bf16 ? half_bits::f32_from_bf16(half_bits::bf16_from_f32(v)) : v; }

// o, dq, dk and dv as the CUDA path computes them: per chunk the GEMMs of the plan and, between
// them, the rows kernels' arithmetic (attention_math.h; the sums in row order here).
std::vector<ref::Vec> run_plan(const attn_gemm::Dims& d, bool causal, const attn::Drop& drop, int64_t budget, bool bf16,
                const ref::Vec& q, const ref::Vec& k, const ref::Vec& v, const ref::Vec& dout) {
  Buffers b;
  auto low = [&](const ref::Vec& x) {
    std::vector<float> f(x.size());
    for (size_t i = 0; i < x.size(); ++i) f[i] = rounded(float(x[i]), bf16);
    return f;
  };
  b[Buf::Q] = low(q), b[Buf::K] = low(k), b[Buf::V] = low(v), b[Buf::dO] = low(dout);
  b[Buf::O].assign(size_t(d.B * d.T * d.H * d.Dv), NAN);
  b[Buf::dQ].assign(q.size(), NAN), b[Buf::dK].assign(k.size(), NAN), b[Buf::dV].assign(v.size(), NAN);
  const std::vector<attn_gemm::Chunk> cs = attn_gemm::chunks(d, budget);
  int64_t most = 0;
  for (const auto& c : cs) most = std::max(most, c.count);
  for (Buf s : {Buf::Scores, Buf::Probs, Buf::DProbs, Buf::DScores}) b[s].assign(size_t(most * d.T * d.S), NAN);
  std::vector<float> lse(size_t(d.B * d.H * d.T), NAN);
  for (const auto& c : cs) {  // forward
    run_gemm(b, attn_gemm::scores(d, c));
    for (int64_t r = 0; r < c.count * d.T; ++r) {
      const int64_t e = r / d.T, i = r % d.T, bh = attn_gemm::pair_of(c, d.H, e);
      const float* s = &b[Buf::Scores][size_t(r * d.S)];
      const int64_t keys = attn::visible_keys(i, d.S, causal);
      float m = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) m = std::max(m, s[j]);
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j) sum += std::exp(double(s[j] - m));
      const float l = attn::lse_of(m, sum);
      for (int64_t j = 0; j < d.S; ++j)
        b[Buf::Probs][size_t(r * d.S + j)] =
            j < keys ? rounded(attn::prob(s[j], l) * attn::drop_factor(drop, attn::element(bh, i, j, d.T, d.S)), bf16) : 0.0f;
      lse[size_t(bh * d.T + i)] = l;
    }
    run_gemm(b, attn_gemm::output(d, c));
  }
  const std::vector<float> o = b[Buf::O];  // forward's o, f32 (the rows read it as the kernel does)
  for (const auto& c : cs) {  // backward
    run_gemm(b, attn_gemm::scores(d, c));
    run_gemm(b, attn_gemm::dprobs(d, c));
    for (int64_t r = 0; r < c.count * d.T; ++r) {
      const int64_t e = r / d.T, i = r % d.T, bh = attn_gemm::pair_of(c, d.H, e);
      const int64_t row = ((bh / d.H) * d.T + i) * d.H * d.Dv + (bh % d.H) * d.Dv;
      double D = 0;
      for (int64_t t = 0; t < d.Dv; ++t) D += double(float(dout[size_t(row + t)])) * double(o[size_t(row + t)]);
      const int64_t keys = attn::visible_keys(i, d.S, causal);
      for (int64_t j = 0; j < d.S; ++j) {
        const size_t x = size_t(r * d.S + j);
        float pf = 0, g = 0;
        if (j < keys) {
          const float p = attn::prob(b[Buf::Scores][x], lse[size_t(bh * d.T + i)]);
          const float f = attn::drop_factor(drop, attn::element(bh, i, j, d.T, d.S));
          pf = p * f;
          g = d.scale * attn::score_grad(p, b[Buf::DProbs][x] * f, float(D));
        }
        b[Buf::Probs][x] = rounded(pf, bf16);
        b[Buf::DScores][x] = rounded(g, bf16);
      }
    }
    run_gemm(b, attn_gemm::dvalues(d, c));
    run_gemm(b, attn_gemm::dqueries(d, c));
    run_gemm(b, attn_gemm::dkeys(d, c));
  }
  return {kmath::to_doubles(o), kmath::to_doubles(b[Buf::dQ]), kmath::to_doubles(b[Buf::dK]), kmath::to_doubles(b[Buf::dV])};
}

}  // namespace

TEST_CASE("attention's attn_gemm plan: chunks cover every (batch, head) pair once, over the smaller axis, within "
          "the budget") {
  for (const auto& [B, H, T, S, budget] : std::vector<std::array<int64_t, 5>>{
           {1, 1, 1, 1, 1}, {4, 12, 1024, 1024, int64_t(1) << 24}, {64, 12, 1024, 1024, int64_t(1) << 24},
           {3, 5, 7, 9, 2 * 7 * 9}, {5, 3, 7, 9, 1}, {2, 2, 300, 300, 1000}}) {
    INFO("B " << B << ", H " << H << ", T " << T << ", S " << S << ", budget " << budget);
    const attn_gemm::Dims d{B, T, S, H, 8, 8, 1.0f};
    std::vector<int> seen(size_t(B * H), 0);
    for (const auto& c : attn_gemm::chunks(d, budget)) {
      CHECK(c.over_heads == (B <= H));
      CHECK(c.count >= 1);
      CHECK((c.count == 1 || c.count * T * S <= budget));
      for (int64_t e = 0; e < c.count; ++e) ++seen[size_t(attn_gemm::pair_of(c, H, e))];
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
  CHECK(attn_gemm::chunks(attn_gemm::Dims{0, 5, 5, 2, 4, 4, 1.0f}, 100).empty());
}

// Each output relative to its scale (its largest value, or what its operands make of it). f32: a
// rounding per term of the longest sum on its path (T or S, Dk, Dv) and a few more (exp, lse, the
// products), 4 u each (worst seen: 2% of the bound); bf16: the scores' error from rounding q and k
// (2^-8·scale·Σ|q||k|, the largest over the rows), which exp carries into p and lse, plus a bf16
// rounding of each GEMM's two operands, 4x for the chain to dq and dk (worst seen: 6%).
TEST_CASE("attention's attn_gemm plan run on the host matches float64 (chunked or not, either loop axis, causal, "
          "cross-attention, dropout, f32 and bf16 operands)") {
  std::mt19937_64 rng(0xA7E);
  for (int n = 0; n < 60; ++n) {
    const int64_t B = uniform_int(rng, 1, 4), H = uniform_int(rng, 1, 4), Dk = uniform_int(rng, 1, 20),
                  Dv = uniform_int(rng, 1, 20), T = uniform_int(rng, 1, 40);
    const int64_t S = uniform_int(rng, 0, 1) ? T : uniform_int(rng, 1, 40);
    const bool causal = uniform_int(rng, 0, 1) == 1, bf16 = n % 3 == 2;
    const float rate = n % 4 == 1 ? 0.3f : 0.0f;
    const int64_t budget = n % 2 ? T * S * uniform_int(rng, 1, 3) : int64_t(1) << 24;
    INFO("case " << n << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", Dk " << Dk << ", Dv " << Dv
                 << (causal ? ", causal" : "") << ", dropout " << rate << ", budget " << budget << (bf16 ? ", bf16" : ""));
    const attn_gemm::Dims d{B, T, S, H, Dk, Dv, float(1.0 / std::sqrt(double(Dk)))};
    const ref::Vec q = kmath::random_floats(size_t(B * T * H * Dk), rng, -2, 2);
    const ref::Vec k = kmath::random_floats(size_t(B * S * H * Dk), rng, -2, 2);
    const ref::Vec v = kmath::random_floats(size_t(B * S * H * Dv), rng), g = kmath::random_floats(size_t(B * T * H * Dv), rng);
    const uint64_t seed = rng();
    const attn::Drop drop = attn::make_drop(rate, seed);
    const ref::Vec mask = ref::attention_dropout_mask(size_t(B * H * T * S), rate, seed);
    const ref::Vec* m = rate > 0 ? &mask : nullptr;
    const std::vector<ref::Vec> want = ref::attention_outputs(q, k, v, g, B, T, S, H, Dk, Dv, causal, m);
    const std::vector<ref::Vec> got = run_plan(d, causal, drop, budget, bf16, q, k, v, g);
    const double score_err = bf16 ? std::ldexp(1.0, -8) * d.scale * ref::attention_largest_qk(q, k, B, T, S, H, Dk) : 0.0;
    const double tol = bf16 ? 4 * (score_err + std::ldexp(1.0, -8)) : 4 * kmath::kU * double(std::max(T, S) + Dk + Dv + 8);
    const std::vector<double> errs = ref::attention_errors(got, want, q, k, v, g, Dk, rate);
    for (int t = 0; t < 4; ++t) {
      INFO("output " << t << " (o, dq, dk, dv): error " << errs[size_t(t)] << " of the scale, bound " << tol);
      CHECK(errs[size_t(t)] <= tol);
    }
  }
}
