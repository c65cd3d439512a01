// bf16 and f16 storage as bit manipulations on host and device: f32 -> 16 bits rounded to nearest even, and the exact widening back.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/ops/math/hd.h"

// One definition for every backend: the CPU's bf16 (cpu_bf16.h) and the CUDA kernels' bf16 and
// f16 loads and stores (cuda_dtype.cuh) call these, so the rounding the GPU applies when it
// stores an activation is the one tests/unit/ops/kernel_math_half_test.cpp checks on the host
// (every 16-bit pattern, every tie, and a sweep of f32 patterns against a float64 nearest-value
// search). Both roundings are IEEE round-to-nearest, ties to even, with overflow to infinity; a
// NaN stays a NaN, made quiet, keeping its sign and the top bits of its payload.

namespace trainer::half_bits {

TRAINER_HD_INLINE uint32_t bits_of(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

TRAINER_HD_INLINE float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// bfloat16: the upper 16 bits of an f32 (8 exponent bits, 7 mantissa bits). Rounding adds just
// under half of the dropped part, plus the kept part's lowest bit (ties to even); a carry runs
// into the exponent, so the largest finite values round to infinity as they should. Branch-free
// but for the NaN select, so CPU loops over it vectorise.
TRAINER_HD_INLINE uint16_t bf16_from_f32(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

TRAINER_HD_INLINE float f32_from_bf16(uint16_t b) { return float_of(uint32_t(b) << 16); }

// IEEE binary16: 5 exponent bits (bias 15), 10 mantissa bits; largest finite 65504, smallest
// normal 2^-14, subnormals k·2^-24.
TRAINER_HD_INLINE uint16_t f16_from_f32(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  // From 65520 = 65504 + half an ulp on, infinity (the tie goes up: 65504's mantissa is odd).
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // normal: rebias the exponent (127 -> 15), round 13 bits off
    const uint32_t r = a - 0x38000000u;
    return uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return uint16_t(sign);  // |v| <= 2^-25, half the smallest subnormal (a tie goes to 0)
  // Subnormal: the value is mant·2^(e - 150) with the implicit bit; in units of 2^-24 that is
  // mant >> (126 - e), shift 14..24, rounded to nearest even on the dropped bits. A round up to
  // 0x400 is the smallest normal's pattern, as it should be.
  const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

TRAINER_HD_INLINE float f32_from_f16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));  // inf, NaN (payload kept)
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
  const float mag = float(m) * 5.9604644775390625e-8f;  // m·2^-24: exact (m < 2^10, a normal f32)
  return sign ? -mag : mag;
}

}  // namespace trainer::half_bits
