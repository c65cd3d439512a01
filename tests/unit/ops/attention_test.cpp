// attention tests: forward and every gradient against float64 on every backend (causal or not, heads, odd sizes, cross-attention, batch 1, large scores), the same bits at 1-4 threads and on every call, bad shapes named.
#include <array>
#include <cmath>
#include <cstring>

#include "backends.h"
#include "core/ops/attention.h"
#include "core/ops/math/philox.h"
#include "fastpath_fuzz.h"
#include "reference_transformer.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_attention_cudnn.h"
#endif

using namespace trainer;
using namespace trainer::test;

namespace {

struct Case {
  int64_t B, T, S, H, Dk, Dv;
  bool causal;
  double spread = 1;  // q and k in ±spread: large spreads make near one-hot rows
};

// A random case of the fuzz tests: q and k in ±2, v and dout in ±1, a dropout seed, and float64's
// o, dq, dk and dv (with the seed's mask when rate > 0).
struct Drawn {
  Tensor q, k, v, g;
  DropoutSeed drop;
  ref::Vec vq, vk, vv;
  std::vector<ref::Vec> want;
};

Drawn draw(std::mt19937_64& rng, const Case& c, float rate) {
  Drawn x;
  x.q = random_tensor({c.B, c.T, c.H * c.Dk}, rng, -2.0, 2.0), x.k = random_tensor({c.B, c.S, c.H * c.Dk}, rng, -2.0, 2.0);
  x.v = random_tensor({c.B, c.S, c.H * c.Dv}, rng), x.g = random_tensor({c.B, c.T, c.H * c.Dv}, rng);
  x.drop = DropoutSeed{rng(), nullptr};
  const ref::Vec mask = ref::attention_dropout_mask(size_t(c.B * c.H * c.T * c.S), rate, x.drop.value);
  x.vq = to_vec(x.q), x.vk = to_vec(x.k), x.vv = to_vec(x.v);
  x.want = ref::attention_outputs(x.vq, x.vk, x.vv, to_vec(x.g), c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal,
                                  rate > 0 ? &mask : nullptr);
  return x;
}

// o, dq, dk and dv of x (H heads) by `kern` on backend `be`, twice (each from fresh NaN outputs).
std::array<std::vector<ref::Vec>, 2> run_twice(const Backend& be, AttentionKernel& kern, const Drawn& x, int64_t H,
                                               float rate) {
  std::array<std::vector<ref::Vec>, 2> runs;
  const int64_t B = x.q.dim(0), T = x.q.dim(1);
  for (auto& run : runs) {
    Tensor o = be.nan({B, T, x.g.dim(2)}), lse = be.nan({B, H, T});
    Tensor dq = be.nan(x.q.shape()), dk = be.nan(x.k.shape()), dv = be.nan(x.v.shape());
    const Tensor q = be.upload(x.q), k = be.upload(x.k), v = be.upload(x.v);
    kern.forward(q, k, v, o, lse, rate > 0 ? &x.drop : nullptr);
    kern.backward(q, k, v, o, lse, be.upload(x.g), dq, dk, dv, rate > 0 ? &x.drop : nullptr);
    run = {be.vec(o), be.vec(dq), be.vec(dk), be.vec(dv)};
  }
  return runs;
}

}  // namespace

TEST_CASE("attention forward and backward match float64 reference", "[backends]") {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 1, false},  // one query, one key: o = v
      {1, 1, 1, 1, 1, 1, true},
      {2, 5, 5, 1, 4, 4, true},
      {2, 5, 5, 2, 3, 5, false},   // Dk != Dv
      {1, 7, 4, 3, 8, 2, false},   // cross-attention: T != S
      {1, 4, 7, 2, 8, 8, true},    // causal with more keys than queries (Keras: the lower triangle of [T, S])
      {3, 33, 33, 4, 16, 16, true},
      {2, 65, 65, 2, 32, 24, false},
      {1, 300, 300, 1, 8, 8, true},  // more keys than the CUDA kernel's chunk of 256
      {2, 9, 9, 2, 4, 4, true, 6.0},  // scores up to ±72: rows near one-hot
      {0, 5, 5, 2, 4, 4, true},   // an empty batch
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(481);
    for (const Case& c : cases) {
      INFO("B " << c.B << ", T " << c.T << ", S " << c.S << ", H " << c.H << ", Dk " << c.Dk << ", Dv " << c.Dv
                << (c.causal ? ", causal" : "") << ", spread " << c.spread);
      auto k = make_kernel<AttentionKernel>(be.ctx(), AttentionParams{c.H, c.Dk, c.Dv, c.causal});
      const Shape qs{c.B, c.T, c.H * c.Dk}, ks{c.B, c.S, c.H * c.Dk}, vs{c.B, c.S, c.H * c.Dv}, os{c.B, c.T, c.H * c.Dv};
      Tensor hq = random_tensor(qs, rng, -c.spread, c.spread), hk = random_tensor(ks, rng, -c.spread, c.spread);
      Tensor hv = random_tensor(vs, rng), hdo = random_tensor(os, rng);
      const ref::Vec vq = to_vec(hq), vk = to_vec(hk), vv = to_vec(hv);
      Tensor q = be.upload(hq), kk = be.upload(hk), v = be.upload(hv);
      Tensor o = be.nan(os), lse = be.nan({c.B, c.H, c.T});
      k->forward(q, kk, v, o, lse);
      be.check("o", o, ref::attention_forward(vq, vk, vv, c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal));
      ref::Vec dq_want, dk_want, dv_want;
      ref::attention_backward(vq, vk, vv, to_vec(hdo), c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal, dq_want, dk_want,
                              dv_want);
      Tensor dq = be.nan(qs), dk = be.nan(ks), dv = be.nan(vs);
      k->backward(q, kk, v, o, lse, be.upload(hdo), dq, dk, dv);
      be.check("dq", dq, dq_want);
      be.check("dk", dk, dk_want);
      be.check("dv", dv, dv_want);
    }
  }
}

// Keras's MultiHeadAttention(dropout): in training the probabilities are dropped by the dropout
// rule of element ((b·H + h)·T + i)·S + j under the seed (kept ones scaled by 1/(1 - rate)); the
// reference applies that mask to float64 probabilities, forward and backward (the kernels redraw it
// from the seed). Without a seed (evaluation) nothing is dropped; a recorded step's seed, read from
// StepScalars where the kernel runs, is node_seed(step seed, node).
TEST_CASE("attention with dropout on the probabilities matches float64 reference with the same mask", "[backends]") {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 1, false}, {2, 5, 5, 2, 3, 5, true}, {1, 7, 4, 3, 8, 2, false}, {2, 33, 33, 2, 16, 8, true},
      {1, 300, 300, 1, 8, 8, true}};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(484);
    for (const float rate : {0.1f, 0.5f}) {
      for (const Case& c : cases) {
        INFO("rate " << rate << ", B " << c.B << ", T " << c.T << ", S " << c.S << ", H " << c.H << ", Dk " << c.Dk
                     << ", Dv " << c.Dv << (c.causal ? ", causal" : ""));
        auto k = make_kernel<AttentionKernel>(be.ctx(), AttentionParams{c.H, c.Dk, c.Dv, c.causal, rate});
        const Shape qs{c.B, c.T, c.H * c.Dk}, ks{c.B, c.S, c.H * c.Dk}, vs{c.B, c.S, c.H * c.Dv}, os{c.B, c.T, c.H * c.Dv};
        Tensor hq = random_tensor(qs, rng), hk = random_tensor(ks, rng), hv = random_tensor(vs, rng);
        Tensor hdo = random_tensor(os, rng);
        const uint64_t seed = rng();
        ref::Vec mask(size_t(c.B * c.H * c.T * c.S));
        const uint32_t thr = dropout_threshold(rate);
        int64_t kept = 0;
        for (size_t e = 0; e < mask.size(); ++e) {
          const bool keep = dropout_keep(dropout_words(e / 4, seed).v[e % 4], thr);
          mask[e] = keep ? double(dropout_scale(rate)) : 0.0;
          kept += keep;
        }
        if (mask.size() >= 10000) CHECK(std::abs(double(kept) / double(mask.size()) - (1.0 - rate)) < 0.02);
        const ref::Vec vq = to_vec(hq), vk = to_vec(hk), vv = to_vec(hv);
        Tensor q = be.upload(hq), kk = be.upload(hk), v = be.upload(hv), o = be.nan(os), lse = be.nan({c.B, c.H, c.T});
        const DropoutSeed drop{seed, nullptr};
        k->forward(q, kk, v, o, lse, &drop);
        be.check("o", o, ref::attention_forward(vq, vk, vv, c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal, &mask));
        ref::Vec dq_want, dk_want, dv_want;
        ref::attention_backward(vq, vk, vv, to_vec(hdo), c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal, dq_want, dk_want,
                                dv_want, &mask);
        Tensor dq = be.nan(qs), dk = be.nan(ks), dv = be.nan(vs);
        k->backward(q, kk, v, o, lse, be.upload(hdo), dq, dk, dv, &drop);
        be.check("dq", dq, dq_want);
        be.check("dk", dk, dk_want);
        be.check("dv", dv, dv_want);
        // The recorded step's form: the seed read from StepScalars in the context's memory.
        StepScalars step;
        step.set_seed(seed ^ 0x5555);
        Tensor hstep = Tensor::empty({int64_t(sizeof step / sizeof(float))});
        std::memcpy(hstep.data(), &step, sizeof step);
        Tensor dstep = be.upload(hstep), o2 = be.nan(os), o3 = be.nan(os);
        const DropoutSeed recorded{7, static_cast<const StepScalars*>(dstep.data())};
        const DropoutSeed direct{node_seed(seed ^ 0x5555, 7), nullptr};
        k->forward(q, kk, v, o2, lse, &recorded);
        k->forward(q, kk, v, o3, lse, &direct);
        CHECK(be.vec(o2) == be.vec(o3));
        // Evaluation: no seed, nothing dropped.
        Tensor o4 = be.nan(os);
        k->forward(q, kk, v, o4, lse);
        be.check("o without dropout", o4, ref::attention_forward(vq, vk, vv, c.B, c.T, c.S, c.H, c.Dk, c.Dv, c.causal));
      }
    }
  }
}

TEST_CASE("attention: causal rows ignore later keys (changing them changes nothing before them)", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(482);
    const int64_t B = 1, T = 6, H = 2, D = 4;
    auto k = make_kernel<AttentionKernel>(be.ctx(), AttentionParams{H, D, D, true});
    Tensor hq = random_tensor({B, T, H * D}, rng), hk = random_tensor({B, T, H * D}, rng), hv = random_tensor({B, T, H * D}, rng);
    Tensor o1 = be.empty({B, T, H * D}), o2 = be.empty({B, T, H * D}), lse = be.empty({B, H, T});
    k->forward(be.upload(hq), be.upload(hk), be.upload(hv), o1, lse);
    for (int64_t c = 3 * H * D; c < T * H * D; ++c) hk.f32()[c] += 5.0f, hv.f32()[c] -= 3.0f;  // keys 3.. changed
    k->forward(be.upload(hq), be.upload(hk), be.upload(hv), o2, lse);
    const ref::Vec a = be.vec(o1), b = be.vec(o2);
    CHECK(ref::Vec(a.begin(), a.begin() + 3 * H * D) == ref::Vec(b.begin(), b.begin() + 3 * H * D));
    CHECK(ref::Vec(a.begin() + 3 * H * D, a.end()) != ref::Vec(b.begin() + 3 * H * D, b.end()));
  }
}

// Each (batch, head) is one thread's, its products on that thread alone (and its dropout mask a
// function of the element): the same bits at 1, 2, 3 and 4 threads, and on every call.
TEST_CASE("attention: the same bits at 1 to 4 CPU threads and on every call, with and without dropout") {
  std::mt19937_64 rng(483);
  const int64_t B = 3, T = 40, S = 40, H = 3, Dk = 16, Dv = 8;
  Tensor q = random_tensor({B, T, H * Dk}, rng), k = random_tensor({B, S, H * Dk}, rng);
  Tensor v = random_tensor({B, S, H * Dv}, rng), g = random_tensor({B, T, H * Dv}, rng);
  const DropoutSeed seed{12345, nullptr};
  for (const float rate : {0.0f, 0.3f}) {
    std::vector<ref::Vec> first;
    for (int threads = 1; threads <= 4; ++threads)
      for (int call = 0; call < 2; ++call) {
        OpContext& ctx = fuzz::cpu_context_for(threads, Precision::FP32, FastPaths::all());
        auto kern = make_kernel<AttentionKernel>(ctx, AttentionParams{H, Dk, Dv, true, rate});
        Tensor o = Tensor::empty({B, T, H * Dv}), lse = Tensor::empty({B, H, T});
        Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
        kern->forward(q, k, v, o, lse, &seed);
        kern->backward(q, k, v, o, lse, g, dq, dk, dv, &seed);
        const std::vector<ref::Vec> got = {to_vec(o), to_vec(lse), to_vec(dq), to_vec(dk), to_vec(dv)};
        if (first.empty()) first = got;
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("rate " << rate << ", threads " << threads << ", call " << call << ", output " << i
                       << " (o, lse, dq, dk, dv)");
          CHECK(got[i] == first[i]);
        }
      }
  }
}

TEST_CASE("attention rejects shapes that do not fit, naming them", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<AttentionKernel>(be.ctx(), AttentionParams{2, 4, 3, false});
    Tensor q = be.zeros({1, 5, 8}), kk = be.zeros({1, 6, 8}), v = be.zeros({1, 6, 6});
    Tensor o = be.empty({1, 5, 6}), lse = be.empty({1, 2, 5});
    Tensor bad_k = be.zeros({1, 6, 7}), bad_v = be.zeros({1, 5, 6}), no_keys = be.zeros({1, 0, 8}), none_v = be.zeros({1, 0, 6});
    CHECK_NOTHROW(k->forward(q, kk, v, o, lse));
    CHECK_THROWS_WITH(k->forward(q, bad_k, v, o, lse), "attention: k has shape [1x6x7], expected [1x6x8]");
    CHECK_THROWS_WITH(k->forward(q, kk, bad_v, o, lse), "attention: v has shape [1x5x6], expected [1x6x6]");
    CHECK_THROWS_WITH(k->forward(q, no_keys, none_v, o, lse),
                      "attention: no keys: a query needs at least one key to attend to");
    Tensor bad_lse = be.empty({1, 5, 2});
    CHECK_THROWS_AS(k->forward(q, kk, v, o, bad_lse), std::invalid_argument);
    CHECK_THROWS_AS(make_kernel<AttentionKernel>(be.ctx(), AttentionParams{0, 4, 4, false}), std::invalid_argument);
  }
}

// The CPU attention's fast paths — attn_blocks (query rows in blocks of 64, or 16 with the
// micro-kernel, each block against the keys its rows see), softmax_exp (the exponentials by
// cpu::exp_poly, vectorised, the row sums in lanes), attn_kernel (the products by our AVX-512
// micro-kernel) and attn_softmax (the rows in AVX-512, one exponential per score) — each alone and
// in every combination against the reference (one block of every row against every visible key,
// libm's expf summed in order, sgemm), on random shapes (batch 1, one head, odd sizes, cross-attention, causal or not, with and without dropout) at 1-4 threads: each path against
// float64, a fast one within 4x the reference path's own error on the same operands (plus 16 ulps
// of the output's scale), and all within the CPU bound. The seed is printed.
TEST_CASE("attention: attn_blocks, softmax_exp, attn_kernel and attn_softmax against one block of every row with libm's expf "
          "and sgemm, random shapes, 1-4 threads, float64 as the judge", "[fuzz]") {
  const fuzz::Budget budget(40);
  fuzz::Tally tally("attn_blocks, softmax_exp, attn_kernel, attn_softmax");
  for (int64_t c = 0; budget.more(c); ++c) {
    if (budget.skip(c)) continue;
    std::mt19937_64 rng = budget.rng(c, 0xA77);
    const int64_t B = uniform_int(rng, 1, 2), H = uniform_int(rng, 1, 3), Dk = uniform_int(rng, 1, 24),
                  Dv = uniform_int(rng, 1, 24), T = uniform_int(rng, 1, 160);
    const bool self = uniform_int(rng, 0, 2) > 0, causal = uniform_int(rng, 0, 1) == 1;
    const int64_t S = self ? T : uniform_int(rng, 1, 160);
    const float rate = uniform_int(rng, 0, 2) == 0 ? 0.25f : 0.0f;
    const int threads = int(uniform_int(rng, 1, 4));
    INFO(budget.repro(c) << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", Dk " << Dk
                 << ", Dv " << Dv << (causal ? ", causal" : "") << ", dropout " << rate << ", " << threads << " threads");
    const Drawn x = draw(rng, {B, T, S, H, Dk, Dv, causal}, rate);
    const Tensor &q = x.q, &k = x.k, &v = x.v, &g = x.g;
    const DropoutSeed& drop = x.drop;
    const ref::Vec &vq = x.vq, &vk = x.vk, &vv = x.vv;
    const std::vector<ref::Vec>& want = x.want;
    // fast: bit 0 attn_blocks, bit 1 softmax_exp, bit 2 attn_kernel, bit 3 attn_softmax (0: the reference).
    std::vector<double> err[16];
    for (int fast = 0; fast < 16; ++fast) {
      const FastPaths paths = FastPaths::all()
                                  .with(FastPath::AttnBlocks, fast & 1)
                                  .with(FastPath::SoftmaxExp, fast & 2)
                                  .with(FastPath::AttnKernel, fast & 4)
                                  .with(FastPath::AttnSoftmax, fast & 8);
      OpContext& ctx = fuzz::cpu_context_for(threads, Precision::FP32, paths);
      auto kern = make_kernel<AttentionKernel>(ctx, AttentionParams{H, Dk, Dv, causal, rate});
      Tensor o = Tensor::empty({B, T, H * Dv}), lse = Tensor::empty({B, H, T});
      Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
      kern->forward(q, k, v, o, lse, rate > 0 ? &drop : nullptr);
      kern->backward(q, k, v, o, lse, g, dq, dk, dv, rate > 0 ? &drop : nullptr);
      err[fast] = ref::attention_errors({to_vec(o), to_vec(dq), to_vec(dk), to_vec(dv)}, want, vq, vk, vv, to_vec(g), Dk, rate);
    }
    const double ulp = std::ldexp(1.0, -24);
    double ratio = 0;
    for (int fast = 1; fast < 16; ++fast)
      for (int t = 0; t < 4; ++t) {
        INFO("output " << t << " (o, dq, dk, dv): reference path error " << err[0][size_t(t)] << ", fast paths "
                       << ((fast & 1) ? "attn_blocks " : "") << ((fast & 2) ? "softmax_exp " : "")
                       << ((fast & 4) ? "attn_kernel " : "") << ((fast & 8) ? "attn_softmax " : "") << err[fast][size_t(t)]
                       << " (relative to the output's scale)");
        CHECK(err[0][size_t(t)] <= kCpuTolerance);
        CHECK(err[fast][size_t(t)] <= 4 * err[0][size_t(t)] + 16 * ulp);
        ratio = std::max(ratio, err[fast][size_t(t)] / (4 * err[0][size_t(t)] + 16 * ulp));
      }
    tally.wide(threads, ratio, "case " + std::to_string(c) + (T > 64 ? " (several blocks)" : ""));
  }
  tally.report(budget);
}

// The CUDA attention's attn_gemm fast path (batched cuBLAS GEMMs around a rows kernel;
// kernel_math_attention_test.cpp runs its plan on the host) against the reference path (one block
// per query row) and float64, on random shapes (batch 1, one head, odd sizes, cross-attention,
// causal or not, dropout, Dk or Dv above 64) and one shape whose pairs' scores span two chunks
// (3 pairs of 2400 x 2400). fp32: within 4x the reference path's error plus 16 ulps of the scale
// (or 4 u per term of the longest sum, kernel_math_attention_test.cpp's bound, if larger);
// bf16 and f16 (their operands rounded for tensor cores): the host test's bound, 4·(the scores'
// error from rounding q and k + one rounding). Every path gives the same bits on a second call.
TEST_CASE("attention (cuda): attn_gemm (batched GEMMs) against the reference kernel and float64, random shapes, "
          "fp32, bf16 and f16", "[fuzz]") {
  const Backend* gpu = gpu_backend();
  if (!gpu) return;
  const Device dev = gpu->ctx().device();
  auto context = [&](Precision p, bool fast) {
    return gpu_context(dev, p, FastPaths::all().with(FastPath::AttnGemm, fast).with(FastPath::AttnCudnn, false));
  };
  struct Path {
    const char* name;
    OpContext* ctx;
    double round;  // the operands' rounding (0: f32)
  };
  const std::vector<Path> paths = {{"fp32 reference", context(Precision::FP32, false), 0},
                                   {"fp32 attn_gemm", context(Precision::FP32, true), 0},
                                   {"bf16 attn_gemm", context(Precision::BF16, true), std::ldexp(1.0, -8)},
                                   {"f16 attn_gemm", context(Precision::FP16, true), std::ldexp(1.0, -11)}};
  const fuzz::Budget budget(60);
  for (int64_t c = 0; budget.more(c); ++c) {
    if (budget.skip(c)) continue;
    std::mt19937_64 rng = budget.rng(c, 0xA76);
    int64_t B = uniform_int(rng, 1, 3), H = uniform_int(rng, 1, 4), Dk = uniform_int(rng, 1, 80),
            Dv = uniform_int(rng, 1, 80), T = uniform_int(rng, 1, 300);
    const bool self = uniform_int(rng, 0, 2) > 0, causal = uniform_int(rng, 0, 1) == 1;
    int64_t S = self ? T : uniform_int(rng, 1, 300);
    if (c == 0) B = 1, H = 3, T = S = 2400, Dk = Dv = 8;  // two chunks of score rows
    const float rate = uniform_int(rng, 0, 2) == 0 ? 0.25f : 0.0f;
    INFO(budget.repro(c) << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", Dk " << Dk << ", Dv "
                         << Dv << (causal ? ", causal" : "") << ", dropout " << rate);
    const Drawn x = draw(rng, {B, T, S, H, Dk, Dv, causal}, rate);
    const ref::Vec &vq = x.vq, &vk = x.vk, &vv = x.vv;
    const std::vector<ref::Vec>& want = x.want;
    const double qk = ref::attention_largest_qk(vq, vk, B, T, S, H, Dk);
    const double scale = 1.0 / std::sqrt(double(Dk));
    std::vector<double> ref_err;
    for (const Path& p : paths) {
      Backend be{p.name, p.ctx, kCudaTolerance};
      auto kern = make_kernel<AttentionKernel>(*p.ctx, AttentionParams{H, Dk, Dv, causal, rate});
      const auto runs = run_twice(be, *kern, x, H, rate);
      const std::vector<double> errs = ref::attention_errors(runs[0], want, vq, vk, vv, to_vec(x.g), Dk, rate);
      for (int t = 0; t < 4; ++t) {
        const double e = errs[size_t(t)];
        // fp32: 4x the reference kernel's own error + 16 ulps, or the host test's bound of the
        // GEMMs' arithmetic (4 u per term of the longest sum) where the reference was lucky.
        const double u = std::ldexp(1.0, -24), sums = 4 * u * double(std::max(T, S) + Dk + Dv + 8);
        const double bound = p.round > 0 ? 4 * (p.round * scale * qk + p.round)
                             : ref_err.size() == 4 ? std::max(4 * ref_err[size_t(t)] + 16 * u, sums)
                                                   : kCudaTolerance;
        INFO(p.name << ", output " << t << " (o, dq, dk, dv): error " << e << " of the scale, bound " << bound);
        CHECK(e <= bound);
        CHECK(runs[0][size_t(t)] == runs[1][size_t(t)]);
        if (ref_err.size() < 4) ref_err.push_back(e);
      }
    }
  }
}

#ifdef TRAINER_HAVE_CUDA
// The attn_cudnn fast path (cuDNN's fused flash attention through its graph API; attention_graph_test
// runs its graphs on the host, cudnn_attention_plan_test has cuDNN accept them without a GPU) against
// float64 and attn_gemm, bf16 and f16, on shapes it takes (one head width for keys and values, a
// multiple of 8, no dropout): batch 1, one head, odd lengths, cross-attention, GPT-2 124M's layer;
// one query against one key, whose backward it leaves to attn_gemm. Bound: the host tests' for the
// low types, 4·(the scores' error from rounding q and k + one rounding); the same bits on a second
// call (cuDNN's deterministic backward graph); cuDNN ran every call it takes (no silent fallback).
TEST_CASE("attention (cuda): attn_cudnn (cuDNN's fused flash attention) against float64 and attn_gemm, bf16 and "
          "f16", "[fuzz]") {
  const Backend* gpu = gpu_backend();
  if (!gpu) return;
  if (cudnnGetVersion() < cuda::AttentionCudnn::kMinVersion)
    TRAINER_SKIP(Package, "cuDNN " << cudnnGetVersion() << " is older than attn_cudnn's " << cuda::AttentionCudnn::kMinVersion);
  const Device dev = gpu->ctx().device();
  auto context = [&](Precision p, bool cudnn) {
    return gpu_context(dev, p, FastPaths::defaults().with(FastPath::AttnCudnn, cudnn));
  };
  struct Path {
    const char* name;
    OpContext* ctx;
    double round;
    bool cudnn;
  };
  const std::vector<Path> paths = {{"bf16 attn_gemm", context(Precision::BF16, false), std::ldexp(1.0, -8), false},
                                   {"bf16 attn_cudnn", context(Precision::BF16, true), std::ldexp(1.0, -8), true},
                                   {"f16 attn_cudnn", context(Precision::FP16, true), std::ldexp(1.0, -11), true}};
  const fuzz::Budget budget(40);
  for (int64_t c = 0; budget.more(c); ++c) {
    if (budget.skip(c)) continue;
    std::mt19937_64 rng = budget.rng(c, 0xC0D);
    int64_t B = uniform_int(rng, 1, 3), H = uniform_int(rng, 1, 4), D = 8 * uniform_int(rng, 1, 16),
            T = uniform_int(rng, 1, 300);
    const bool self = uniform_int(rng, 0, 2) > 0;
    bool causal = uniform_int(rng, 0, 1) == 1;
    int64_t S = self ? T : uniform_int(rng, 1, 300);
    if (c == 0) B = 2, H = 12, T = S = 1024, D = 64, causal = true;  // GPT-2 124M's layer
    if (c == 1) T = S = 1;                                            // backward left to attn_gemm
    INFO(budget.repro(c) << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", D " << D
                         << (causal ? ", causal" : ""));
    const Drawn x = draw(rng, {B, T, S, H, D, D, causal}, 0.0f);
    const double qk = ref::attention_largest_qk(x.vq, x.vk, B, T, S, H, D), scale = 1.0 / std::sqrt(double(D));
    for (const Path& p : paths) {
      Backend be{p.name, p.ctx, kCudaTolerance};
      auto kern = make_kernel<AttentionKernel>(*p.ctx, AttentionParams{H, D, D, causal, 0.0f});
      const uint64_t before = cuda::AttentionCudnn::runs();
      const auto runs = run_twice(be, *kern, x, H, 0.0f);
      const uint64_t ran = cuda::AttentionCudnn::runs() - before;
      AttentionDims d;
      d.B = B, d.T = T, d.S = S, d.H = H, d.Dk = d.Dv = D, d.causal = causal;
      CHECK(ran == (p.cudnn ? 2u * (cuda::AttentionCudnn::takes(d, false) + cuda::AttentionCudnn::takes(d, true)) : 0u));
      const std::vector<double> errs = ref::attention_errors(runs[0], x.want, x.vq, x.vk, x.vv, to_vec(x.g), D, 0.0f);
      const double bound = 4 * (p.round * scale * qk + p.round);
      for (int t = 0; t < 4; ++t) {
        INFO(p.name << ", output " << t << " (o, dq, dk, dv): error " << errs[size_t(t)] << " of the scale, bound " << bound);
        CHECK(errs[size_t(t)] <= bound);
        CHECK(runs[0][size_t(t)] == runs[1][size_t(t)]);
      }
    }
  }
}
#endif
