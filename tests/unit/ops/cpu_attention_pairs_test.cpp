// attn_bf16's packers (cpu_attention_pairs.h) against a scalar model on random shapes and strides: f32 rows rounded to nearest even (denormals to 0, NaN kept a NaN), bf16 bits copied, odd edges padded with 0, nothing written outside the words.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/cpu/cpu_attention_gemm.h"
#include "core/ops/cpu/cpu_attention_pairs.h"
#include "core/ops/cpu/cpu_bf16.h"
#include "skip.h"

using namespace trainer;

namespace {

constexpr uint32_t kSentinel = 0xDEADBEEFu;

// The model of one value's bf16: cpu::round_bf16 (to nearest even), but 0 (of its sign) below
// 2^-126, where VDPBF16PS takes either as 0; NaN as any NaN (checked apart).
uint16_t model_bits(float v) {
  if (std::isnan(v)) return 0x7FC0;
  if (std::abs(v) < std::numeric_limits<float>::min()) return uint16_t(std::bit_cast<uint32_t>(v) >> 31 << 15);
  return cpu::round_bf16(v).bits;
}

bool same_word(uint32_t got, uint32_t want) {
  auto half = [](uint32_t w, int h) { return uint16_t(w >> (16 * h)); };
  auto is_nan = [](uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; };
  for (int h = 0; h < 2; ++h)
    if (!(half(got, h) == half(want, h) || (is_nan(half(got, h)) && is_nan(half(want, h))))) return false;
  return true;
}

// Values of every kind: normal over many binades, exact bf16 values, ties, denormals, zeros, NaN, infinities.
float draw(std::mt19937& rng) {
  const int kind = std::uniform_int_distribution<int>(0, 19)(rng);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  switch (kind) {
    case 0: return 0.0f;
    case 1: return (u(rng) > 0 ? 1.0f : -1.0f) * std::numeric_limits<float>::denorm_min() * float(std::uniform_int_distribution<int>(1, 1 << 20)(rng));
    case 2: return std::numeric_limits<float>::quiet_NaN();
    case 3: return u(rng) > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    case 4: return std::bit_cast<float>((std::bit_cast<uint32_t>(u(rng)) & 0xFFFF0000u) | 0x8000u);  // a tie
    case 5: return cpu::to_f32(cpu::round_bf16(u(rng)));
    default: return std::ldexp(u(rng), std::uniform_int_distribution<int>(-40, 40)(rng));
  }
}

}  // namespace

TEST_CASE("attn_bf16 packers: rounded f32 pairs and copied bf16 bits, along rows and down columns, against a scalar model, random shapes") {
  if (!cpu::attn_bf16_available()) TRAINER_SKIP(CpuFeature, "attn_bf16's packers need AVX512_BF16, which this CPU lacks");
  std::mt19937 rng(20261201);
  for (int c = 0; c < 400; ++c) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 40)(rng), cols = std::uniform_int_distribution<int64_t>(1, 70)(rng);
    const int64_t ld = cols + std::uniform_int_distribution<int64_t>(0, 9)(rng);
    INFO("case " << c << ": " << rows << " x " << cols << ", ld " << ld);
    std::vector<float> f(size_t(rows * ld));
    std::vector<uint16_t> b(size_t(rows * ld));
    for (float& v : f) v = draw(rng);
    for (uint16_t& v : b) v = uint16_t(rng());
    auto fit = [&](int64_t r, int64_t k) { return r < rows && k < cols ? model_bits(f[size_t(r * ld + k)]) : uint16_t(0); };
    auto bit = [&](int64_t r, int64_t k) { return r < rows && k < cols ? b[size_t(r * ld + k)] : uint16_t(0); };
    auto word = [](uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); };
    // Each packing into a buffer of sentinels with slack on every row: (its rows, row width, ld, pack, model).
    struct Packing {
      const char* name;
      int64_t out_rows, out_cols;
      void (*pack)(const void*, int64_t, int64_t, int64_t, uint32_t*, int64_t);
      std::function<uint32_t(int64_t, int64_t)> want;
    };
    const int64_t R2 = cpu::pairs(rows), C2 = cpu::pairs(cols);
    const std::vector<Packing> packings = {
        {"pairs_in_rows", rows, C2,
         [](const void* s, int64_t l, int64_t r, int64_t k, uint32_t* d, int64_t ldd) { cpu::pairs_in_rows(static_cast<const float*>(s), l, r, k, d, ldd); },
         [&](int64_t i, int64_t j) { return word(fit(i, 2 * j), fit(i, 2 * j + 1)); }},
        {"pairs_in_cols", R2, cols,
         [](const void* s, int64_t l, int64_t r, int64_t k, uint32_t* d, int64_t ldd) { cpu::pairs_in_cols(static_cast<const float*>(s), l, r, k, d, ldd); },
         [&](int64_t j, int64_t k) { return word(fit(2 * j, k), fit(2 * j + 1, k)); }},
        {"bits_in_rows_t", C2, rows,
         [](const void* s, int64_t l, int64_t r, int64_t k, uint32_t* d, int64_t ldd) { cpu::bits_in_rows_t(static_cast<const uint16_t*>(s), l, r, k, d, ldd); },
         [&](int64_t j, int64_t i) { return word(bit(i, 2 * j), bit(i, 2 * j + 1)); }},
        {"bits_in_cols", R2, cols,
         [](const void* s, int64_t l, int64_t r, int64_t k, uint32_t* d, int64_t ldd) { cpu::bits_in_cols(static_cast<const uint16_t*>(s), l, r, k, d, ldd); },
         [&](int64_t j, int64_t k) { return word(bit(2 * j, k), bit(2 * j + 1, k)); }},
    };
    for (const Packing& p : packings) {
      INFO(p.name);
      const int64_t ldd = p.out_cols + std::uniform_int_distribution<int64_t>(0, 17)(rng);
      std::vector<uint32_t> out(size_t((p.out_rows + 1) * ldd), kSentinel);
      const bool from_bits = p.name[0] == 'b';
      p.pack(from_bits ? static_cast<const void*>(b.data()) : static_cast<const void*>(f.data()), ld, rows, cols, out.data(), ldd);
      int64_t wrong = 0, outside = 0;
      for (int64_t i = 0; i <= p.out_rows; ++i)
        for (int64_t j = 0; j < ldd; ++j) {
          const uint32_t got = out[size_t(i * ldd + j)];
          if (i < p.out_rows && j < p.out_cols) wrong += !(from_bits ? got == p.want(i, j) : same_word(got, p.want(i, j)));
          else outside += got != kSentinel;
        }
      CHECK(wrong == 0);
      CHECK(outside == 0);
    }
  }
}
