// bf16 convolution weight gradients on AVX512-BF16 dot products of image pairs (see cpu_conv_wgrad_bf16.h).
#include "core/ops/cpu/cpu_conv_wgrad_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/ops/cpu/cpu_util.h"

// Everything down to the pragma's end is compiled for AVX-512 (F, BW, VL) and AVX512_BF16, whatever
// the build's -march, and runs only where available() (compiled for the build's target, at the end)
// says the CPU has them; nothing in it runs at start-up.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#endif

namespace trainer::cpu {
namespace {

constexpr int64_t kChunkBytes = 448 << 10;  // packed x and dy of one chunk, per thread: within L2
constexpr int64_t kAlign = 64;
constexpr int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// dst[2i] = a[i], dst[2i + 1] = b[i] (0 where b is null) for i < n.
void interleave(const uint16_t* a, const uint16_t* b, uint16_t* dst, int64_t n) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                      5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512i va = _mm512_loadu_si512(a + i), vb = b ? _mm512_loadu_si512(b + i) : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + 2 * i, _mm512_permutex2var_epi16(va, lo, vb));
    _mm512_storeu_si512(dst + 2 * i + 32, _mm512_permutex2var_epi16(va, hi, vb));
  }
  if (i == n) return;
  const int64_t rem = n - i;  // 1..31
  const __mmask32 in = __mmask32((uint64_t(1) << rem) - 1);
  __m512i va = _mm512_maskz_loadu_epi16(in, a + i), vb = b ? _mm512_maskz_loadu_epi16(in, b + i) : _mm512_setzero_si512();
  const int64_t out = 2 * rem;  // 2..62 elements
  _mm512_mask_storeu_epi16(dst + 2 * i, __mmask32((uint64_t(1) << std::min<int64_t>(out, 32)) - 1),
                           _mm512_permutex2var_epi16(va, lo, vb));
  if (out > 32)
    _mm512_mask_storeu_epi16(dst + 2 * i + 32, __mmask32((uint64_t(1) << (out - 32)) - 1),
                             _mm512_permutex2var_epi16(va, hi, vb));
}

// The bf16 values p[0..15] where m is set as f32 (0 elsewhere). The maskz forms: GCC 12 warns
// about the unmasked ones' undefined pass-through.
__m512 widen(__mmask16 m, const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, p)), 16));
}

// acc[c] += a[c] (+ b[c]) for the c < n channels of bf16 rows a and b (b may be null).
void add_channels(const uint16_t* a, const uint16_t* b, float* acc, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = n - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - c)) - 1);
    __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + c), widen(m, a + c));
    if (b) s = _mm512_add_ps(s, widen(m, b + c));
    _mm512_mask_storeu_ps(acc + c, m, s);
  }
}

// Strides (in uint16 elements) and counts of one chunk's output positions: m image pairs × r rows
// × w columns.
struct Walk {
  int64_t x_w, x_r, x_m, dy_w, dy_r, dy_m;
  int64_t w, r, m;
};

// dw[i][16v..16v+15] (row stride ocp) += Σ over the chunk's positions of x pair i (broadcast) · dy
// pairs of 16 output channels, for ICB input channels and OV vectors of 16 output channels; with
// `first`, dw = that sum (the thread's first chunk: its dw is not read, so never zeroed).
template <int OV, int ICB>
void micro(float* dw, int64_t ocp, const uint16_t* xp, const uint16_t* dyp, const Walk& k, bool first) {
  __m512 acc[ICB][OV];
  for (int i = 0; i < ICB; ++i)
    for (int v = 0; v < OV; ++v) acc[i][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(dw + i * ocp + v * 16);
  for (int64_t m = 0; m < k.m; ++m)
    for (int64_t r = 0; r < k.r; ++r) {
      const uint16_t* xr = xp + m * k.x_m + r * k.x_r;
      const uint16_t* dr = dyp + m * k.dy_m + r * k.dy_r;
      for (int64_t w = 0; w < k.w; ++w) {
        __m512bh d[OV];
        for (int v = 0; v < OV; ++v) d[v] = (__m512bh)_mm512_loadu_si512(dr + w * k.dy_w + v * 32);
        const uint16_t* xw = xr + w * k.x_w;
        for (int i = 0; i < ICB; ++i) {
          int32_t pair;
          std::memcpy(&pair, xw + 2 * i, sizeof pair);
          const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
          for (int v = 0; v < OV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], xb, d[v]);
        }
      }
    }
  for (int i = 0; i < ICB; ++i)
    for (int v = 0; v < OV; ++v) _mm512_storeu_ps(dw + i * ocp + v * 16, acc[i][v]);
}

using Micro = void (*)(float*, int64_t, const uint16_t*, const uint16_t*, const Walk&, bool);
constexpr int kMaxIcb = 12;
// Input channels per block for OV vectors of output channels: 24 accumulators (12 for one vector).
constexpr std::array<int, 5> kIcb = {0, 12, 12, 8, 6};

template <int OV, int... I>
constexpr std::array<Micro, kMaxIcb + 1> row(std::integer_sequence<int, I...>) {
  return {nullptr, &micro<OV, I + 1>...};
}
constexpr std::array<std::array<Micro, kMaxIcb + 1>, 5> kMicro = {  // constant: no initializer runs at start-up
    std::array<Micro, kMaxIcb + 1>{}, row<1>(std::make_integer_sequence<int, kMaxIcb>{}),
    row<2>(std::make_integer_sequence<int, kMaxIcb>{}), row<3>(std::make_integer_sequence<int, kMaxIcb>{}),
    row<4>(std::make_integer_sequence<int, kMaxIcb>{})};

}  // namespace

// Image pairs [pair0, pair0 + pairs) × output rows [h0, h0 + rows).
struct ConvWgradBf16::Chunk {
  int64_t pair0, pairs, h0, rows;
};

ConvWgradBf16::ConvWgradBf16(const CpuContext& c, const ConvGeometry& g, const Window& w)
    : g_(g), w_(w), threads_(std::max(1, c.threads())) {
  ocp_ = align_up(g.oc, 16);
  wp_ = (g.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1;
  const int64_t halo = (w.kh - 1) * w.dh + 1;  // packed x rows for one output row
  auto bytes = [&](int64_t rows) { return (((rows - 1) * w.sh + halo) * wp_ * g.ic + rows * g.ow * ocp_) * 4; };
  const int64_t pairs = (g.n + 1) / 2, per_thread = (pairs + threads_ - 1) / threads_;
  if (bytes(g.oh) <= kChunkBytes) {  // whole images, several pairs per chunk
    rows_ = g.oh;
    pairs_per_chunk_ = std::clamp<int64_t>(kChunkBytes / bytes(g.oh), 1, std::max<int64_t>(per_thread, 1));
  } else {  // bands of rows of one pair
    rows_ = 1;
    while (rows_ < g.oh && bytes(rows_ + 1) <= kChunkBytes) ++rows_;
    pairs_per_chunk_ = 1;
  }
  xrows_ = (rows_ - 1) * w.sh + halo;
  dw_elems_ = int64_t(w.kh) * w.kw * g.ic * ocp_;
  x_elems_ = pairs_per_chunk_ * xrows_ * wp_ * g.ic * 2;
  dy_elems_ = pairs_per_chunk_ * rows_ * g.ow * ocp_ * 2;
  thread_bytes_ =
      align_up(dw_elems_ * 4, kAlign) + align_up(ocp_ * 4, kAlign) + align_up(x_elems_ * 2, kAlign) +
      align_up(dy_elems_ * 2, kAlign);
}

void ConvWgradBf16::pack(const uint16_t* x, const uint16_t* dy, const Chunk& ch, uint16_t* xp, uint16_t* dyp,
                         float* dbp) const {
  const ConvGeometry& g = g_;
  const int64_t xr = (ch.rows - 1) * w_.sh + (w_.kh - 1) * w_.dh + 1;
  for (int64_t m = 0; m < ch.pairs; ++m) {
    const int64_t n0 = 2 * (ch.pair0 + m), n1 = n0 + 1;
    const bool second = n1 < g.n;
    for (int64_t r = 0; r < ch.rows; ++r) {  // dy: a row at once where no channel padding interrupts it
      const uint16_t* a = dy + (n0 * g.oh + ch.h0 + r) * g.ow * g.oc;
      const uint16_t* b = second ? a + g.oh * g.ow * g.oc : nullptr;
      uint16_t* d = dyp + (m * rows_ + r) * g.ow * ocp_ * 2;
      if (ocp_ == g.oc) {
        interleave(a, b, d, g.ow * g.oc);
      } else {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          interleave(a + ow * g.oc, b ? b + ow * g.oc : nullptr, d + ow * ocp_ * 2, g.oc);
          std::memset(d + ow * ocp_ * 2 + 2 * g.oc, 0, (ocp_ - g.oc) * 4);
        }
      }
      if (dbp)
        for (int64_t ow = 0; ow < g.ow; ++ow) add_channels(a + ow * g.oc, b ? b + ow * g.oc : nullptr, dbp, g.oc);
    }
    for (int64_t r = 0; r < xr; ++r) {  // x: zeros, the row's valid columns at once, zeros
      const int64_t ih = ch.h0 * w_.sh - g.pt + r;
      uint16_t* d = xp + (m * xrows_ + r) * wp_ * g.ic * 2;
      if (ih < 0 || ih >= g.ih) {
        std::memset(d, 0, wp_ * g.ic * 4);
        continue;
      }
      const int64_t c0 = std::min<int64_t>(g.pl, wp_), c1 = std::min<int64_t>(wp_, g.pl + g.iw);  // iw = col - pl
      const uint16_t* a = x + (n0 * g.ih + ih) * g.iw * g.ic;
      std::memset(d, 0, c0 * g.ic * 4);
      if (c1 > c0) interleave(a, second ? a + g.ih * g.iw * g.ic : nullptr, d + c0 * g.ic * 2, (c1 - c0) * g.ic);
      std::memset(d + std::max(c0, c1) * g.ic * 2, 0, (wp_ - std::max(c0, c1)) * g.ic * 4);
    }
  }
}

void ConvWgradBf16::accumulate(const Chunk& ch, const uint16_t* xp, const uint16_t* dyp, float* dwp,
                               bool first) const {
  const int64_t ic = g_.ic;
  const Walk k{w_.sw * ic * 2,  w_.sh * wp_ * ic * 2, xrows_ * wp_ * ic * 2, ocp_ * 2, g_.ow * ocp_ * 2,
               rows_ * g_.ow * ocp_ * 2, g_.ow, ch.rows, ch.pairs};
  // Without dilation across the row, tap kw's input channels follow tap kw - 1's in a packed row,
  // as do their rows of dw: one kernel row's taps are one run of kw·ic pairs (conv1's 3 channels
  // fill a block of 9 instead of three blocks of 3).
  const bool merged = w_.dw == 1;
  const int64_t run = merged ? w_.kw * ic : ic;
  for (int kh = 0; kh < w_.kh; ++kh)
    for (int kw = 0; kw < (merged ? 1 : w_.kw); ++kw) {
      const uint16_t* xk = xp + (int64_t(kh) * w_.dh * wp_ + int64_t(kw) * w_.dw) * ic * 2;
      float* dwk = dwp + (int64_t(kh) * w_.kw + kw) * ic * ocp_;
      for (int64_t o = 0; o < ocp_; o += 64) {
        const int ov = int(std::min<int64_t>(4, (ocp_ - o) / 16)), icb = kIcb[ov];
        for (int64_t i = 0; i < run; i += icb)
          kMicro[ov][std::min<int64_t>(icb, run - i)](dwk + i * ocp_ + o, ocp_, xk + i * 2, dyp + o * 2, k, first);
      }
    }
}

void ConvWgradBf16::run(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  const auto* xs = static_cast<const uint16_t*>(x.data());
  const auto* dys = static_cast<const uint16_t*>(dy.data());
  auto* dwo = static_cast<float*>(dw.data());
  float* dbo = db ? static_cast<float*>(db->data()) : nullptr;
  auto* base = static_cast<char*>(thread_scratch(kScratchDnnl, threads_ * thread_bytes_));  // 64-byte aligned
  const int64_t pairs = (g_.n + 1) / 2, rows_out = int64_t(w_.kh) * w_.kw * g_.ic;
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    char* mine = base + t * thread_bytes_;
    auto* dwp = reinterpret_cast<float*>(mine);
    auto* dbp = reinterpret_cast<float*>(mine + align_up(dw_elems_ * 4, kAlign));
    auto* xp = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(dbp) + align_up(ocp_ * 4, kAlign));
    auto* dyp = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(xp) + align_up(x_elems_ * 2, kAlign));
    std::memset(dbp, 0, ocp_ * 4);
    const int64_t p0 = pairs * t / nt, p1 = pairs * (t + 1) / nt;
    bool first = true;  // dwp is written by the first chunk's micro-kernels, added to by the others
    for (int64_t p = p0; p < p1; p += pairs_per_chunk_)
      for (int64_t h0 = 0; h0 < g_.oh; h0 += rows_) {
        const Chunk ch{p, std::min(pairs_per_chunk_, p1 - p), h0, std::min(rows_, g_.oh - h0)};
        pack(xs, dys, ch, xp, dyp, dbo ? dbp : nullptr);
        accumulate(ch, xp, dyp, dwp, first);
        first = false;
      }
    if (first) std::memset(dwp, 0, dw_elems_ * 4);  // no pairs for this thread
#pragma omp barrier
    // The threads' sums, in thread order: each thread a share of dw's rows (and thread 0 db).
    for (int64_t j = rows_out * t / nt; j < rows_out * (t + 1) / nt; ++j)
      for (int64_t o = 0; o < g_.oc; ++o) {
        float s = 0;
        for (int u = 0; u < nt; ++u) s += reinterpret_cast<const float*>(base + u * thread_bytes_)[j * ocp_ + o];
        dwo[j * g_.oc + o] = s;
      }
    if (dbo && t == 0)
      for (int64_t o = 0; o < g_.oc; ++o) {
        float s = 0;
        for (int u = 0; u < nt; ++u)
          s += reinterpret_cast<const float*>(base + u * thread_bytes_ + align_up(dw_elems_ * 4, kAlign))[o];
        dbo[o] = s;
      }
  }
}

}  // namespace trainer::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace trainer::cpu {

bool ConvWgradBf16::available() {
  const auto need = unsigned(dnnl::cpu_isa::avx512_core_bf16);
  return (unsigned(dnnl::get_effective_cpu_isa()) & need) == need;
}

}  // namespace trainer::cpu
