// Convolution weight gradients on AVX-512: f32 FMAs, or AVX512-BF16 dot products of image pairs (see cpu_conv_wgrad.h).
#include "core/ops/cpu/cpu_conv_wgrad.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/ops/cpu/cpu_isa_region.h"
#include "core/ops/cpu/cpu_util.h"

// Everything down to the region's end is compiled for AVX-512 (F, BW, VL) and AVX512_BF16, whatever
// the build's -march, and runs only where available() (compiled for the build's target, at the end)
// says the CPU has what its type uses: the f32 path (F32Lanes) only AVX-512 F, BW and VL (its
// intrinsics are those; AVX512_BF16 instructions come only from Bf16Lanes' dot products), the bf16
// path AVX512_BF16 as well. Nothing in it runs at start-up.
TRAINER_ISA_BEGIN("avx512f,avx512bw,avx512vl,avx512bf16")

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

__mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// The bf16 values p[0..15] where m is set as f32 (0 elsewhere). The maskz forms: GCC 12 warns
// about the unmasked ones' undefined pass-through.
__m512 widen(__mmask16 m, const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, p)), 16));
}

// What differs between the types: how a word is packed from the images' values (lay), how db adds
// a row of dy (add), and the micro-kernel's multiply-add of a broadcast x word and 16 dy words.
struct Bf16Lanes {  // a word: one channel of two images (the second 0 where the batch is odd)
  using T = uint16_t;
  using V = __m512bh;
  static constexpr int kImages = 2;
  static void lay(const T* a, const T* b, uint32_t* dst, int64_t n) {
    interleave(a, b, reinterpret_cast<uint16_t*>(dst), n);
  }
  // acc[c] += a[c] (+ b[c]) for the c < n channels of rows a and b (b may be null).
  static void add(const T* a, const T* b, float* acc, int64_t n) {
    for (int64_t c = 0; c < n; c += 16) {
      const __mmask16 m = first_lanes(n - c);
      __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + c), widen(m, a + c));
      if (b) s = _mm512_add_ps(s, widen(m, b + c));
      _mm512_mask_storeu_ps(acc + c, m, s);
    }
  }
  static V load(const uint32_t* p) { return (V)_mm512_loadu_si512(p); }
  static V broadcast(const uint32_t* p) { return (V)_mm512_set1_epi32(int32_t(*p)); }
  static __m512 madd(__m512 acc, V x, V d) { return _mm512_dpbf16_ps(acc, x, d); }
};

struct F32Lanes {  // a word: one image's value (b is always null)
  using T = float;
  using V = __m512;
  static constexpr int kImages = 1;
  static void lay(const T* a, const T*, uint32_t* dst, int64_t n) { std::memcpy(dst, a, size_t(n) * 4); }
  static void add(const T* a, const T*, float* acc, int64_t n) {
    for (int64_t c = 0; c < n; c += 16) {
      const __mmask16 m = first_lanes(n - c);
      const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + c), _mm512_maskz_loadu_ps(m, a + c));
      _mm512_mask_storeu_ps(acc + c, m, sum);
    }
  }
  static V load(const uint32_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
  static V broadcast(const uint32_t* p) { return _mm512_set1_ps(*reinterpret_cast<const float*>(p)); }
  static __m512 madd(__m512 acc, V x, V d) { return _mm512_fmadd_ps(x, d, acc); }
};

// Strides (in words) and counts of one chunk's output positions: m image groups × r rows × w
// columns.
struct Walk {
  int64_t x_w, x_r, x_m, dy_w, dy_r, dy_m;
  int64_t w, r, m;
};

// dw[i][16v..16v+15] (row stride ocp) += Σ over the chunk's positions of x word i (broadcast) · dy
// words of 16 output channels, for ICB input channels and OV vectors of 16 output channels; with
// `first`, dw = that sum (the thread's first chunk: its dw is not read, so never zeroed). The sum
// starts from zero and is added to dw once: a sum of chunks' sums, whose rounding grows with a
// chunk's positions, not with all of a thread's (one running sum over 16 images made 1 and 2
// threads' weights 2e-3 apart after 10 Adam steps of configs/smoke.yaml; oneDNN's: 2e-6).
template <class L, int OV, int ICB>
void micro(float* dw, int64_t ocp, const uint32_t* xp, const uint32_t* dyp, const Walk& k, bool first) {
  __m512 acc[ICB][OV];
  for (int i = 0; i < ICB; ++i)
    for (int v = 0; v < OV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t m = 0; m < k.m; ++m)
    for (int64_t r = 0; r < k.r; ++r) {
      const uint32_t* xr = xp + m * k.x_m + r * k.x_r;
      const uint32_t* dr = dyp + m * k.dy_m + r * k.dy_r;
      for (int64_t w = 0; w < k.w; ++w) {
        typename L::V d[OV];
        for (int v = 0; v < OV; ++v) d[v] = L::load(dr + w * k.dy_w + v * 16);
        const uint32_t* xw = xr + w * k.x_w;
        for (int i = 0; i < ICB; ++i) {
          const typename L::V xb = L::broadcast(xw + i);
          for (int v = 0; v < OV; ++v) acc[i][v] = L::madd(acc[i][v], xb, d[v]);
        }
      }
    }
  for (int i = 0; i < ICB; ++i)
    for (int v = 0; v < OV; ++v) {
      float* p = dw + i * ocp + v * 16;
      _mm512_storeu_ps(p, first ? acc[i][v] : _mm512_add_ps(_mm512_loadu_ps(p), acc[i][v]));
    }
}

using Micro = void (*)(float*, int64_t, const uint32_t*, const uint32_t*, const Walk&, bool);
constexpr int kMaxIcb = 12;
// Input channels per block for OV vectors of output channels: 24 accumulators (12 for one vector).
constexpr std::array<int, 5> kIcb = {0, 12, 12, 8, 6};

// Vectors of 16 output channels in the block at the front of `left` channels: 4, but 3 (then 2)
// where 4 would leave a single vector, whose micro-kernel reads as many words as it multiplies.
int vectors(int64_t left) {
  const int64_t v = left / 16;
  return v == 5 ? 3 : int(std::min<int64_t>(4, v));
}

template <class L, int OV, int... I>
constexpr std::array<Micro, kMaxIcb + 1> row(std::integer_sequence<int, I...>) {
  return {nullptr, &micro<L, OV, I + 1>...};
}
template <class L>
constexpr std::array<std::array<Micro, kMaxIcb + 1>, 5> kMicro = {  // constant: no initializer runs at start-up
    std::array<Micro, kMaxIcb + 1>{}, row<L, 1>(std::make_integer_sequence<int, kMaxIcb>{}),
    row<L, 2>(std::make_integer_sequence<int, kMaxIcb>{}), row<L, 3>(std::make_integer_sequence<int, kMaxIcb>{}),
    row<L, 4>(std::make_integer_sequence<int, kMaxIcb>{})};

}  // namespace

// Image groups [group0, group0 + groups) × output rows [h0, h0 + rows).
struct ConvWgrad::Chunk {
  int64_t group0, groups, h0, rows;
};

ConvWgrad::ConvWgrad(const CpuContext& c, const ConvGeometry& g, const Window& w, DType t)
    : g_(g), w_(w), type_(t), images_(t == DType::BF16 ? 2 : 1), threads_(std::max(1, c.threads())) {
  if (t != DType::BF16 && t != DType::F32) throw std::logic_error("ConvWgrad: activations must be f32 or bf16");
  ocp_ = align_up(g.oc, 16);
  wp_ = (g.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1;
  const int64_t halo = (w.kh - 1) * w.dh + 1;  // packed x rows for one output row
  auto bytes = [&](int64_t rows) { return (((rows - 1) * w.sh + halo) * wp_ * g.ic + rows * g.ow * ocp_) * 4; };
  const int64_t groups = (g.n + images_ - 1) / images_, per_thread = (groups + threads_ - 1) / threads_;
  if (bytes(g.oh) <= kChunkBytes) {  // whole images, several groups per chunk
    rows_ = g.oh;
    groups_per_chunk_ = std::clamp<int64_t>(kChunkBytes / bytes(g.oh), 1, std::max<int64_t>(per_thread, 1));
  } else {  // bands of rows of one group
    rows_ = 1;
    while (rows_ < g.oh && bytes(rows_ + 1) <= kChunkBytes) ++rows_;
    groups_per_chunk_ = 1;
  }
  xrows_ = (rows_ - 1) * w.sh + halo;
  dw_elems_ = int64_t(w.kh) * w.kw * g.ic * ocp_;
  x_words_ = groups_per_chunk_ * xrows_ * wp_ * g.ic;
  dy_words_ = groups_per_chunk_ * rows_ * g.ow * ocp_;
  thread_bytes_ = align_up(dw_elems_ * 4, kAlign) + align_up(ocp_ * 4, kAlign) + align_up(x_words_ * 4, kAlign) +
                  align_up(dy_words_ * 4, kAlign);
}

template <class L>
void ConvWgrad::pack(const typename L::T* x, const typename L::T* dy, const Chunk& ch, uint32_t* xp, uint32_t* dyp,
                     float* dbp) const {
  const ConvGeometry& g = g_;
  const int64_t xr = (ch.rows - 1) * w_.sh + (w_.kh - 1) * w_.dh + 1;
  for (int64_t m = 0; m < ch.groups; ++m) {
    const int64_t n0 = L::kImages * (ch.group0 + m);
    const bool second = L::kImages == 2 && n0 + 1 < g.n;  // bf16: the group's second image
    for (int64_t r = 0; r < ch.rows; ++r) {  // dy: a row at once where no channel padding interrupts it
      const typename L::T* a = dy + (n0 * g.oh + ch.h0 + r) * g.ow * g.oc;
      const typename L::T* b = second ? a + g.oh * g.ow * g.oc : nullptr;
      uint32_t* d = dyp + (m * rows_ + r) * g.ow * ocp_;
      if (ocp_ == g.oc) {
        L::lay(a, b, d, g.ow * g.oc);
      } else {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          L::lay(a + ow * g.oc, b ? b + ow * g.oc : nullptr, d + ow * ocp_, g.oc);
          std::memset(d + ow * ocp_ + g.oc, 0, (ocp_ - g.oc) * 4);
        }
      }
      if (dbp)
        for (int64_t ow = 0; ow < g.ow; ++ow) L::add(a + ow * g.oc, b ? b + ow * g.oc : nullptr, dbp, g.oc);
    }
    for (int64_t r = 0; r < xr; ++r) {  // x: zeros, the row's valid columns at once, zeros
      const int64_t ih = ch.h0 * w_.sh - g.pt + r;
      uint32_t* d = xp + (m * xrows_ + r) * wp_ * g.ic;
      if (ih < 0 || ih >= g.ih) {
        std::memset(d, 0, wp_ * g.ic * 4);
        continue;
      }
      const int64_t c0 = std::min<int64_t>(g.pl, wp_), c1 = std::min<int64_t>(wp_, g.pl + g.iw);  // iw = col - pl
      const typename L::T* a = x + (n0 * g.ih + ih) * g.iw * g.ic;
      std::memset(d, 0, c0 * g.ic * 4);
      if (c1 > c0) L::lay(a, second ? a + g.ih * g.iw * g.ic : nullptr, d + c0 * g.ic, (c1 - c0) * g.ic);
      std::memset(d + std::max(c0, c1) * g.ic, 0, (wp_ - std::max(c0, c1)) * g.ic * 4);
    }
  }
}

template <class L>
void ConvWgrad::accumulate(const Chunk& ch, const uint32_t* xp, const uint32_t* dyp, float* dwp, bool first) const {
  const int64_t ic = g_.ic;
  const Walk k{w_.sw * ic, w_.sh * wp_ * ic, xrows_ * wp_ * ic, ocp_, g_.ow * ocp_, rows_ * g_.ow * ocp_,
               g_.ow,      ch.rows,          ch.groups};
  // Without dilation across the row, tap kw's input channels follow tap kw - 1's in a packed row,
  // as do their rows of dw: one kernel row's taps are one run of kw·ic words (conv1's 3 channels
  // fill a block of 9 instead of three blocks of 3).
  const bool merged = w_.dw == 1;
  const int64_t run = merged ? w_.kw * ic : ic;
  for (int kh = 0; kh < w_.kh; ++kh)
    for (int kw = 0; kw < (merged ? 1 : w_.kw); ++kw) {
      const uint32_t* xk = xp + (int64_t(kh) * w_.dh * wp_ + int64_t(kw) * w_.dw) * ic;
      float* dwk = dwp + (int64_t(kh) * w_.kw + kw) * ic * ocp_;
      for (int64_t o = 0; o < ocp_; o += 16 * vectors(ocp_ - o)) {
        const int ov = vectors(ocp_ - o), icb = kIcb[ov];
        for (int64_t i = 0; i < run; i += icb)
          kMicro<L>[ov][std::min<int64_t>(icb, run - i)](dwk + i * ocp_ + o, ocp_, xk + i, dyp + o, k, first);
      }
    }
}

void ConvWgrad::run(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  if (x.dtype() != type_ || dy.dtype() != type_)
    throw std::logic_error("ConvWgrad: x and dy must have the type the kernel was made for");
  if (type_ == DType::BF16)
    run_as<Bf16Lanes>(x, dy, dw, db);
  else
    run_as<F32Lanes>(x, dy, dw, db);
}

template <class L>
void ConvWgrad::run_as(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  const auto* xs = static_cast<const typename L::T*>(x.data());
  const auto* dys = static_cast<const typename L::T*>(dy.data());
  auto* dwo = static_cast<float*>(dw.data());
  float* dbo = db ? static_cast<float*>(db->data()) : nullptr;
  auto* base = static_cast<char*>(thread_scratch(kScratchDnnl, threads_ * thread_bytes_));  // 64-byte aligned
  const int64_t groups = (g_.n + images_ - 1) / images_, rows_out = int64_t(w_.kh) * w_.kw * g_.ic;
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    char* mine = base + t * thread_bytes_;
    auto* dwp = reinterpret_cast<float*>(mine);
    auto* dbp = reinterpret_cast<float*>(mine + align_up(dw_elems_ * 4, kAlign));
    auto* xp = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(dbp) + align_up(ocp_ * 4, kAlign));
    auto* dyp = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(xp) + align_up(x_words_ * 4, kAlign));
    std::memset(dbp, 0, ocp_ * 4);
    const int64_t p0 = groups * t / nt, p1 = groups * (t + 1) / nt;
    bool first = true;  // dwp is written by the first chunk's micro-kernels, added to by the others
    for (int64_t p = p0; p < p1; p += groups_per_chunk_)
      for (int64_t h0 = 0; h0 < g_.oh; h0 += rows_) {
        const Chunk ch{p, std::min(groups_per_chunk_, p1 - p), h0, std::min(rows_, g_.oh - h0)};
        pack<L>(xs, dys, ch, xp, dyp, dbo ? dbp : nullptr);
        accumulate<L>(ch, xp, dyp, dwp, first);
        first = false;
      }
    if (first) std::memset(dwp, 0, dw_elems_ * 4);  // no images for this thread
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

TRAINER_ISA_END

namespace trainer::cpu {

bool ConvWgrad::available(DType t) {
  return cpu_has(t == DType::BF16 ? dnnl::cpu_isa::avx512_core_bf16 : dnnl::cpu_isa::avx512_core);
}

bool ConvWgrad::preferred(DType t, const ConvGeometry& g, const Window& w) {
  const char* env = std::getenv("TRAINER_CONV_WGRAD");
  const std::string forced = env ? env : "";
  if (forced == "ours" || forced == "onednn") return forced == "ours";
  return t == DType::BF16 || w.sh > 1 || w.sw > 1 || g.ic <= kFewInputChannels;
}

}  // namespace trainer::cpu
