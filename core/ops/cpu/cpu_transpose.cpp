// The bf16 matrix transpose in AVX-512 F and BW: tiles of thirty-two rows by thirty-two values through transpose16 and VPMOVDW's halves.
#include "core/ops/cpu/cpu_transpose.h"

#include <atomic>

#include "core/ops/cpu/cpu_isa_region.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer::cpu {
namespace {
std::atomic<int64_t> done{0};
}  // namespace
}  // namespace trainer::cpu

TRAINER_ISA_BEGIN("avx512f,avx512bw")

namespace trainer::cpu {
namespace {

// Rows [r0, r0 + nr) (nr ≤ 32) of the full words j0 .. j0 + nw (nw ≤ 16; a word: the value pair 2j,
// 2j + 1) into dst: two transpose16s of sixteen rows, then each of the 2nw rows of dst written as
// one run of nr values (a whole 64-byte line where dst is aligned). (Sixteen rows at a time stored
// half lines of dst's rows, 2·ldd bytes apart — a power of two at gpt_bytes' shapes — which evicted
// one another before they were filled: slower than no copy.)
void tile(const uint16_t* src, int64_t ld, int64_t r0, int64_t nr, int64_t j0, int64_t nw, uint16_t* dst,
          int64_t ldd) {
  const __mmask16 w = first_lanes(nw);
  __m512i a[16], b[16];
  for (int64_t r = 0; r < 16; ++r) {
    a[r] = r < nr ? _mm512_maskz_loadu_epi32(w, src + (r0 + r) * ld + 2 * j0) : _mm512_setzero_si512();
    b[r] = r + 16 < nr ? _mm512_maskz_loadu_epi32(w, src + (r0 + 16 + r) * ld + 2 * j0) : _mm512_setzero_si512();
  }
  transpose16(a);  // a[j] lane r: the word (src[r0 + r][2(j0 + j)], src[r0 + r][2(j0 + j) + 1])
  transpose16(b);  // rows r0 + 16 ..
  const __mmask32 rows = nr >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << nr) - 1u);
  for (int64_t j = 0; j < nw; ++j) {
    uint16_t* d = dst + 2 * (j0 + j) * ldd + r0;
    const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(a[j])), _mm512_cvtepi32_epi16(b[j]), 1);
    const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_srli_epi32(a[j], 16))),
                                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(b[j], 16)), 1);
    _mm512_mask_storeu_epi16(d, rows, lo);        // value 2j of rows r0 .. r0 + nr
    _mm512_mask_storeu_epi16(d + ldd, rows, hi);  // value 2j + 1
  }
}

// Rows [r0, r0 + nr) (nr ≤ 16) of a 32-bit matrix into dst's columns, sixteen columns at a time.
void row_block_f32(const float* src, int64_t ld, int64_t r0, int64_t nr, int64_t cols, float* dst, int64_t ldd) {
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const __mmask16 c = first_lanes(cols - c0);
    __m512i v[16];
    for (int64_t r = 0; r < 16; ++r)
      v[r] = r < nr ? _mm512_maskz_loadu_epi32(c, src + (r0 + r) * ld + c0) : _mm512_setzero_si512();
    transpose16(v);
    for (int64_t j = 0; j < 16 && c0 + j < cols; ++j) _mm512_mask_storeu_epi32(dst + (c0 + j) * ldd + r0, first_lanes(nr), v[j]);
  }
}

}  // namespace

void transpose_bf16(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst, int64_t ldd) {
  // Chunks of 256 rows in parallel; in a chunk, a block of 32 columns of dst's rows at a time down
  // the chunk, so that each row of dst is written in order.
  done.fetch_add(1, std::memory_order_relaxed);
  constexpr int64_t kChunk = 256;
  const int64_t words = cols / 2, chunks = (rows + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = rows < (c + 1) * kChunk ? rows : (c + 1) * kChunk;
    for (int64_t j0 = 0; j0 < words; j0 += 16)
      for (int64_t r0 = c * kChunk; r0 < end; r0 += 32)
        tile(src, ld, r0, end - r0 < 32 ? end - r0 : 32, j0, words - j0 < 16 ? words - j0 : 16, dst, ldd);
    if (cols % 2)  // the odd last column alone
      for (int64_t r = c * kChunk; r < end; ++r) dst[(cols - 1) * ldd + r] = src[r * ld + cols - 1];
  }
}

void transpose_f32(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  const int64_t blocks = (rows + 15) / 16;
  // (The intrinsics live in row_block_f32: clang outlines an OpenMP loop's body into a function
  // the ISA region's target attribute does not reach.)
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) row_block_f32(src, ld, 16 * b, rows - 16 * b < 16 ? rows - 16 * b : 16, cols, dst, ldd);
}

}  // namespace trainer::cpu

TRAINER_ISA_END

namespace trainer::cpu {

bool transpose_bf16_available() { return cpu_has(dnnl::cpu_isa::avx512_core); }
int64_t transposes_done() { return done.load(std::memory_order_relaxed); }

}  // namespace trainer::cpu
