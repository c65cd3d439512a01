// The CPU's AVX-512 transposes (cpu_transpose.h: bf16 and 32-bit matrices, the dense_wgrad fast path's copies) against the definition, on random shapes, strides and 1-3 threads, nothing written outside.
#include <catch2/catch.hpp>
#include <omp.h>

#include <random>
#include <vector>

#include "core/ops/cpu/cpu_transpose.h"
#include "skip.h"

using namespace trainer;

namespace {

// dst [cols x rows] with row stride ldd, filled with a sentinel: after the transpose every element
// (c, r) must be src (r, c), every other word the sentinel.
template <class T, class F>
void check_transpose(F transpose, std::mt19937& rng, int cases, T sentinel) {
  for (int c = 0; c < cases; ++c) {
    const bool big = c % 8 == 0;
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, big ? 700 : 70)(rng);
    const int64_t cols = std::uniform_int_distribution<int64_t>(1, big ? 300 : 70)(rng);
    const int64_t ld = cols + std::uniform_int_distribution<int64_t>(0, 9)(rng);
    const int64_t ldd = rows + std::uniform_int_distribution<int64_t>(0, 17)(rng);
    const int threads = 1 + c % 3;
    INFO("case " << c << ": " << rows << " x " << cols << ", ld " << ld << ", ldd " << ldd << ", " << threads << " thread(s)");
    std::vector<T> src(size_t(rows * ld));
    for (T& v : src) v = T(rng());
    std::vector<T> dst(size_t((cols + 1) * ldd), sentinel);
    omp_set_num_threads(threads);
    transpose(src.data(), ld, rows, cols, dst.data(), ldd);
    int64_t wrong = 0, outside = 0;
    for (int64_t i = 0; i <= cols; ++i)
      for (int64_t j = 0; j < ldd; ++j) {
        const T got = dst[size_t(i * ldd + j)];
        if (i < cols && j < rows) wrong += got != src[size_t(j * ld + i)];
        else outside += got != sentinel;
      }
    CHECK(wrong == 0);
    CHECK(outside == 0);
  }
}

}  // namespace

TEST_CASE("cpu transposes: bf16 and 32-bit matrices against the definition, random shapes and strides, 1-3 threads, nothing written outside") {
  if (!cpu::transpose_bf16_available()) TRAINER_SKIP(CpuFeature, "the transposes need AVX-512 F and BW, which this CPU lacks");
  std::mt19937 rng(20261201);
  check_transpose<uint16_t>(cpu::transpose_bf16, rng, 300, uint16_t(0xDEAD));
  // f32 as its bits: any 32-bit pattern (NaNs included) is moved, not computed.
  check_transpose<uint32_t>([](const uint32_t* s, int64_t ld, int64_t r, int64_t c, uint32_t* d, int64_t ldd) {
    cpu::transpose_f32(reinterpret_cast<const float*>(s), ld, r, c, reinterpret_cast<float*>(d), ldd);
  }, rng, 300, 0xDEADBEEFu);
  omp_set_num_threads(1);
}
