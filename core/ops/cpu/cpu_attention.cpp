// CPU attention: one (batch, head) per thread, its keys and values copied once into the thread's scratch (contiguous f32, widened from bf16), its query rows in blocks (each block's scores against the keys it sees), the products by cpu_attention_products.h (sgemm, or our f32 and bf16 micro-kernels), the exponentials vectorised; backward recomputes the probabilities (and any dropout mask) from the saved log-sum-exp (and seed).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/ops/attention.h"
#include "core/ops/cpu/cpu_attention_products.h"
#include "core/ops/cpu/cpu_attention_softmax.h"
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_exp.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/attention_math.h"

namespace trainer {
namespace {

using cpu::bf16;
using cpu::Block;
using cpu::Pairs;
using cpu::Products;
using cpu::block_of;
using cpu::transposed_ld;

// Query rows per block on the attn_blocks fast path: a block's scores against 1024 keys are 256 KiB
// (a core's L2), and a causal block computes only the keys its last row sees, so the masked upper
// triangle (half of a long sequence's products) is mostly skipped: all but R/T of it. With the
// micro-kernel (attn_kernel), which costs nothing per call, blocks of 16 rows skip more of it (64
// queries of 128 computed 49% more scores than the triangle's, 16 rows 12%: forward 1.50 -> 1.36 ms,
// backward 1.89 -> 1.66 ms for gpt_bytes' attention on 2 threads); sgemm's own cost per call made
// such blocks slower there. Without attn_blocks one block holds every row against every visible
// key (the whole [T, S] scores at once).
constexpr int64_t kRowBlock = 64, kKernelRowBlock = 16;

// Where (b, h)'s first row is in q and o ([B, T, H·D]) and in k and v ([B, S, H·D]), in elements;
// rows are ldk = H·Dk (q, k) and ldv = H·Dv (v, o) apart.
struct HeadAt {
  int64_t q, k, v, o, ldk, ldv;
};

HeadAt head_at(const AttentionDims& d, int64_t b, int64_t h) {
  const int64_t ldk = d.H * d.Dk, ldv = d.H * d.Dv;
  return {b * d.T * ldk + h * d.Dk, b * d.S * ldk + h * d.Dk, b * d.S * ldv + h * d.Dv, b * d.T * ldv + h * d.Dv,
          ldk, ldv};
}

// rows x cols of a strided tensor (T: float or bf16) into contiguous f32, and back (bf16: rounded
// once, here). The copies make every product's operand contiguous: sgemm on a head's rows read
// H·D apart ran at a quarter of its speed on contiguous ones (64 queries against 1024 keys).
template <class T>
void load_rows(const T* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * ld;
    float* o = dst + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = cpu::to_f32(s[c]);
  }
}

// Asks for `rows` rows of `cols` elements, `ld` apart, to be brought into the cache (L2) ahead of
// their use: the next head's rows, fetched while this head computes. A head's rows are H·D apart,
// a strided walk the hardware's prefetchers did not cover: from memory (the step's other layers
// had evicted them), gpt_bytes' attention took 0.9 ms forward and 1.5 ms backward, 0.53 and 1.0
// from cache; with these, 0.63 and 1.24 (2026-12-01). Fetching the outputs' lines for writing
// too made it slower (0.76 forward).
// At most its first 32 KiB of each tensor: a long head's rows (GPT-2's 1024 of 128 bytes, five
// tensors) would not fit in L2 beside the head at work, and a long stride is one the hardware follows.
template <class T>
void prefetch_rows(const T* src, int64_t ld, int64_t rows, int64_t cols) {
  const int64_t bytes = cols * int64_t(sizeof(T));
  rows = std::min(rows, (int64_t(32) << 10) / ((bytes + 63) / 64 * 64));
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(src + r * ld);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
  }
}

// A bf16 tensor's bits (attn_bf16's packers copy them); never called on f32 data (the words path
// runs only on bf16 tensors).
template <class T>
const uint16_t* bits(const T* p) {
  return reinterpret_cast<const uint16_t*>(p);
}

// The same rows transposed: dst [cols, rows] (the micro-kernel's keys and values as its B operand,
// whose rows it reads as vectors).
template <class T>
void load_rows_t(const T* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t ldt) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * ld;
    for (int64_t c = 0; c < cols; ++c) dst[c * ldt + r] = cpu::to_f32(s[c]);
  }
}


template <class T>
void store_rows(const float* src, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * cols;
    T* o = dst + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = cpu::from_f32<T>(s[c]);
  }
}

// D_i = do_i·o_i in double (products of floats are exact there), summed in lanes by index (term c
// in lane c % 8, folded in order): vectorised, and the same bits wherever the row sits.
template <class T>
float row_dot(const float* g, const T* o, int64_t n) {
  constexpr int64_t kLanes = 8;
  double lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += double(g[c + l]) * double(cpu::to_f32(o[c + l]));
  for (; c < n; ++c) lanes[c % kLanes] += double(g[c]) * double(cpu::to_f32(o[c]));
  double s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return float(s);
}

// One row's log-sum-exp over its `keys` scaled scores (attention_math.h: the largest, then the sum
// of exp(s - m) in double), and the row turned into exp(s - lse): libm's expf, summed in
// order (the reference), or with kPoly cpu::exp_poly, vectorised with the sum in lanes (softmax_exp).
template <bool kPoly>
float row_lse(const float* row, int64_t keys) {
  float m = -std::numeric_limits<float>::infinity();
  double sum = 0;
  if constexpr (kPoly) {
    // The comparison std::max makes (a NaN score leaves m as it is), in a form that vectorises.
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < keys; ++j) m = row[j] > m ? row[j] : m;
    sum = cpu::sum_exp_poly(row, keys, m);
  } else {
    for (int64_t j = 0; j < keys; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < keys; ++j) sum += double(std::exp(row[j] - m));
  }
  return attn::lse_of(m, sum);
}

template <bool kPoly>
void row_probabilities(float* row, int64_t keys, float lse) {
  if constexpr (kPoly) {
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) row[j] = cpu::exp_poly(row[j] - lse);
  } else {
    for (int64_t j = 0; j < keys; ++j) row[j] = attn::prob(row[j], lse);
  }
}

// How a row's exponentials are taken: libm's expf summed in order (the reference), cpu::exp_poly
// vectorised (softmax_exp), or the AVX-512 rows of cpu_attention_softmax.h (attn_softmax: one
// exponential per score in forward).
enum class RowExp { Libm, Poly, Avx512 };

// p [n, keys] = the block's probabilities from its queries qb [n, Dk]: the scaled scores, then
// exp(s - lse) where visible, 0 elsewhere. With `lse_out` each row's log-sum-exp is computed
// (forward) and written; otherwise it is read from `lse_in` (backward). Both indexed by the
// block's rows.
void probabilities(const AttentionDims& d, const Products& mm, const float* qb, const Block& bl, float* p,
                   float* lse_out, const float* lse_in, RowExp how) {
  mm.scores(qb, bl, p);
  if (how == RowExp::Avx512 && lse_out) {
    const int64_t first = attn::visible_keys(bl.i0, d.S, d.causal);
    cpu::attn_rows_softmax(p, bl.keys, bl.n, {first, d.causal ? 1 : 0, d.S}, lse_out);
  }
  for (int64_t r = 0; r < bl.n; ++r) {
    float* row = p + r * bl.keys;
    const int64_t keys = attn::visible_keys(bl.i0 + r, d.S, d.causal);
    if (how == RowExp::Avx512) {
      if (!lse_out) cpu::attn_row_exp(row, keys, lse_in[r]);
    } else {
      const bool poly = how == RowExp::Poly;
      float lse = lse_in ? lse_in[r] : 0.0f;
      if (lse_out) lse = lse_out[r] = poly ? row_lse<true>(row, keys) : row_lse<false>(row, keys);
      if (poly) row_probabilities<true>(row, keys, lse);
      else row_probabilities<false>(row, keys, lse);
    }
    std::fill(row + keys, row + bl.keys, 0.0f);
  }
}

// row[0, n) *= m of elements e0, e0 + 1, ... (attention_math.h's drop_factor, one Philox draw per
// four elements).
void drop_row(const attn::Drop& drop, uint64_t e0, float* row, int64_t n) {
  for (int64_t j = 0; j < n;) {
    const uint64_t e = e0 + uint64_t(j);
    const Philox4 r = dropout_words(e / 4, drop.seed);
    for (uint64_t w = e % 4; w < 4 && j < n; ++w, ++j) row[j] *= dropout_keep(r.v[w], drop.threshold) ? drop.scale : 0.0f;
  }
}

attn::Drop drop_of(const AttentionDims& d) {
  return attn::make_drop(d.rate, d.drop.resolve());
}

// The block's rows of p (or dp) times their dropout factors: element ((b·H + h)·T + i)·S + j.
void drop_block(const AttentionDims& d, const attn::Drop& drop, int64_t bh, const Block& bl, float* p) {
  for (int64_t r = 0; r < bl.n; ++r) {
    const int64_t i = bl.i0 + r;
    drop_row(drop, (uint64_t(bh) * uint64_t(d.T) + uint64_t(i)) * uint64_t(d.S), p + r * bl.keys,
             attn::visible_keys(i, d.S, d.causal));
  }
}

// A thread's scratch, carved in order from its share: `take(n)` hands out the next n floats.
struct Carve {
  float* at;
  float* take(int64_t n) {
    float* p = at;
    at += n;
    return p;
  }
};

class CpuAttention final : public AttentionKernel {
 public:
  CpuAttention(OpContext& ctx, const AttentionParams& p)
      : AttentionKernel(ctx, p), ctx_(ctx), blocks_(ctx.fast_paths().has(FastPath::AttnBlocks)),
        exp_(ctx.fast_paths().has(FastPath::AttnSoftmax) && cpu::attn_softmax_available() ? RowExp::Avx512
             : ctx.fast_paths().has(FastPath::SoftmaxExp)                                 ? RowExp::Poly
                                                                                          : RowExp::Libm),
        kernel_(ctx.fast_paths().has(FastPath::AttnKernel) && cpu::attn_kernel_available()),
        bf16_(kernel_ && ctx.fast_paths().has(FastPath::AttnBf16) && cpu::attn_bf16_available()) {}

 private:
  int64_t rows_per_block(const AttentionDims& d) const {
    return blocks_ ? std::min(kernel_ ? kKernelRowBlock : kRowBlock, d.T) : d.T;
  }

  void forward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                    Tensor& lse) override {
    cpu::dispatch_float("attention", "q", q, [&](auto t) {
      using T = decltype(t);
      forward_t<T>(d, static_cast<const T*>(q.data()), static_cast<const T*>(k.data()),
                   static_cast<const T*>(v.data()), static_cast<T*>(o.data()), lse.f32());
    });
  }
  void backward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    cpu::dispatch_float("attention", "q", q, [&](auto t) {
      using T = decltype(t);
      auto in = [](const Tensor& x) { return static_cast<const T*>(x.data()); };
      auto out = [](Tensor& x) { return static_cast<T*>(x.data()); };
      backward_t<T>(d, in(q), in(k), in(v), in(o), lse.f32(), in(dout), out(dq), out(dk), out(dv));
    });
  }

  // Each (b, h) is one thread's, and sgemm inside the parallel region runs on that thread alone:
  // the results do not depend on the thread count. (The region is entered even for one pair.)
  // Per thread: the head's keys and values [S, D] (and, for the f32 micro-kernel, the keys
  // transposed; for attn_bf16, their bf16 words), a block's queries [R, Dk], probabilities [R, S]
  // and output rows [R, Dv], all f32.
  template <class T>
  void forward_t(const AttentionDims& d, const T* q, const T* k, const T* v, T* o, float* lse) {
    const int64_t pairs = d.B * d.H;
    if (pairs == 0 || d.T == 0) return;
    const int64_t R = rows_per_block(d);
    const bool words = bf16_ && std::is_same_v<T, bf16>;  // attn_bf16's products
    const int64_t St = transposed_ld(d.S), per = d.S * (d.Dk + d.Dv) + St * d.Dk + R * (d.Dk + d.S + d.Dv) +
                                                 (words ? Pairs::words(d, R, false) : 0);
    float* scratch = scratch_.as<float>(ctx_, size_t(omp_get_max_threads()) * size_t(per));
    const attn::Drop drop = drop_of(d);
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      Carve c{scratch + size_t(omp_get_thread_num()) * size_t(per)};
      float *kh = c.take(d.S * d.Dk), *kt = c.take(St * d.Dk), *vh = c.take(d.S * d.Dv), *qb = c.take(R * d.Dk),
            *p = c.take(R * d.S), *ob = c.take(R * d.Dv);
      const HeadAt at = head_at(d, bh / d.H, bh % d.H);
      if (bh + 1 < pairs) {  // the next head's inputs (this thread's, unless its share ends here)
        const HeadAt next = head_at(d, (bh + 1) / d.H, (bh + 1) % d.H);
        prefetch_rows(k + next.k, next.ldk, d.S, d.Dk);
        prefetch_rows(v + next.v, next.ldv, d.S, d.Dv);
        prefetch_rows(q + next.q, next.ldk, d.T, d.Dk);
      }
      Pairs pp{};
      if (words) {  // the products read only the words packed from k's and v's bits
        pp = Pairs::of(reinterpret_cast<uint32_t*>(c.take(Pairs::words(d, R, false))), d, R, false, bits(k + at.k),
                       at.ldk, bits(v + at.v), at.ldv);
      } else {
        load_rows(k + at.k, at.ldk, d.S, d.Dk, kh);
        if (kernel_) load_rows_t(k + at.k, at.ldk, d.S, d.Dk, kt, St);
        load_rows(v + at.v, at.ldv, d.S, d.Dv, vh);
      }
      const Products mm{d, kernel_, kh, vh, kt, nullptr, words ? &pp : nullptr};
      for (int64_t i0 = 0; i0 < d.T; i0 += R) {
        const Block bl = block_of(d, i0, R);
        load_rows(q + at.q + i0 * at.ldk, at.ldk, bl.n, d.Dk, qb);
        probabilities(d, mm, qb, bl, p, lse + bh * d.T + i0, nullptr, exp_);
        if (drop.on) drop_block(d, drop, bh, bl, p);
        mm.out(p, bl, ob);
        store_rows(ob, bl.n, d.Dv, o + at.o + i0 * at.ldv, at.ldv);
      }
    }
  }

  // Per block: dv[0, keys) += (p·m)ᵀ·do; dp = (do·vᵀ)·m; ds = scale·p·(dp - D); dq = ds·k;
  // dk[0, keys) += dsᵀ·q (the head's dk and dv summed in f32 scratch over the blocks in order, then
  // stored). Per thread: the head's k, v, dk, dv [S, D]; a block's q, do, dq rows, its
  // probabilities and score gradients [R, S], D [R].
  template <class T>
  void backward_t(const AttentionDims& d, const T* q, const T* k, const T* v, const T* o, const float* lse,
                  const T* dout, T* dq, T* dk, T* dv) {
    const int64_t pairs = d.B * d.H;
    if (pairs == 0 || d.T == 0) {  // no queries: nothing reaches the keys (zero bits in f32 and bf16)
      std::memset(static_cast<void*>(dk), 0, size_t(d.B * d.S * d.H * d.Dk) * sizeof(T));
      std::memset(static_cast<void*>(dv), 0, size_t(d.B * d.S * d.H * d.Dv) * sizeof(T));
      return;
    }
    const int64_t R = rows_per_block(d);
    const bool words = bf16_ && std::is_same_v<T, bf16>;  // attn_bf16's products
    const int64_t St = transposed_ld(d.S);
    const int64_t per = (2 * d.S + St) * (d.Dk + d.Dv) + R * (2 * d.Dk + d.Dv + 2 * d.S + 1) +
                        (words ? Pairs::words(d, R, true) : 0);
    float* scratch = scratch_.as<float>(ctx_, size_t(omp_get_max_threads()) * size_t(per));
    const attn::Drop drop = drop_of(d);
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      Carve c{scratch + size_t(omp_get_thread_num()) * size_t(per)};
      float *kh = c.take(d.S * d.Dk), *kt = c.take(St * d.Dk), *vh = c.take(d.S * d.Dv), *vt = c.take(St * d.Dv);
      float *dkh = c.take(d.S * d.Dk), *dvh = c.take(d.S * d.Dv);
      float *qb = c.take(R * d.Dk), *gb = c.take(R * d.Dv), *dqb = c.take(R * d.Dk), *p = c.take(R * d.S),
            *ds = c.take(R * d.S), *D = c.take(R);
      const HeadAt at = head_at(d, bh / d.H, bh % d.H);
      if (bh + 1 < pairs) {
        const HeadAt next = head_at(d, (bh + 1) / d.H, (bh + 1) % d.H);
        prefetch_rows(k + next.k, next.ldk, d.S, d.Dk);
        prefetch_rows(v + next.v, next.ldv, d.S, d.Dv);
        prefetch_rows(q + next.q, next.ldk, d.T, d.Dk);
        prefetch_rows(o + next.o, next.ldv, d.T, d.Dv);
        prefetch_rows(dout + next.o, next.ldv, d.T, d.Dv);
      }
      Pairs pp{};
      if (words) {
        pp = Pairs::of(reinterpret_cast<uint32_t*>(c.take(Pairs::words(d, R, true))), d, R, true, bits(k + at.k), at.ldk,
                       bits(v + at.v), at.ldv);
      } else {
        load_rows(k + at.k, at.ldk, d.S, d.Dk, kh);
        load_rows(v + at.v, at.ldv, d.S, d.Dv, vh);
        if (kernel_) {
          load_rows_t(k + at.k, at.ldk, d.S, d.Dk, kt, St);
          load_rows_t(v + at.v, at.ldv, d.S, d.Dv, vt, St);
        }
      }
      const Products mm{d, kernel_, kh, vh, kt, vt, words ? &pp : nullptr};
      std::fill(dkh, dkh + d.S * d.Dk, 0.0f);
      std::fill(dvh, dvh + d.S * d.Dv, 0.0f);
      for (int64_t i0 = 0; i0 < d.T; i0 += R) {
        const Block bl = block_of(d, i0, R);
        load_rows(q + at.q + i0 * at.ldk, at.ldk, bl.n, d.Dk, qb);
        load_rows(dout + at.o + i0 * at.ldv, at.ldv, bl.n, d.Dv, gb);
        probabilities(d, mm, qb, bl, p, nullptr, lse + bh * d.T + i0, exp_);
        // dv += (p·m)ᵀ·do (p·m in ds for the while); dp = (do·vᵀ)·m (into ds)
        const float* pm = p;
        if (drop.on) {
          std::copy(p, p + bl.n * bl.keys, ds);
          drop_block(d, drop, bh, bl, ds);
          pm = ds;
        }
        mm.dv_add(pm, gb, bl, dvh);
        mm.dp(gb, bl, ds);
        if (drop.on) drop_block(d, drop, bh, bl, ds);
        for (int64_t r = 0; r < bl.n; ++r) D[r] = row_dot(gb + r * d.Dv, o + at.o + (i0 + r) * at.ldv, d.Dv);
        // ds = scale·p·(dp - D): the scale of dq and dk folded in once
        for (int64_t r = 0; r < bl.n; ++r)
          for (int64_t j = 0; j < bl.keys; ++j)
            ds[r * bl.keys + j] = d.scale * attn::score_grad(p[r * bl.keys + j], ds[r * bl.keys + j], D[r]);
        mm.dq(ds, bl, dqb);
        store_rows(dqb, bl.n, d.Dk, dq + at.q + i0 * at.ldk, at.ldk);
        mm.dk_add(ds, qb, bl, dkh);
      }
      store_rows(dkh, d.S, d.Dk, dk + at.k, at.ldk);
      store_rows(dvh, d.S, d.Dv, dv + at.v, at.ldv);
    }
  }

  OpContext& ctx_;
  const bool blocks_;  // FastPath::AttnBlocks
  const RowExp exp_;   // FastPath::AttnSoftmax where the CPU has AVX-512, else FastPath::SoftmaxExp or libm
  const bool kernel_;  // FastPath::AttnKernel, where the CPU has AVX-512
  const bool bf16_;    // FastPath::AttnBf16 (with attn_kernel), where it has AVX512_BF16: bf16 tensors' products
  Scratch scratch_;    // per thread: the head's operands and a block's (forward_t, backward_t)
};

static RegisterKernel<AttentionKernel, CpuAttention> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
