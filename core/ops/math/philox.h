// Philox-4x32-10 counter-based RNG (Salmon et al., SC'11) and the dropout keep rule shared by all backends.
#pragma once
#include <cstdint>

#include "core/ops/math/hd.h"

namespace trainer {

struct Philox4 {
  uint32_t v[4];
};

// Four 32-bit random words as a pure function of a 128-bit counter and a 64-bit key.
TRAINER_HD_INLINE Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Dropout: element i of a tensor draws word i % 4 of philox4x32(counter = i / 4 (64-bit, low word
// first), 0, 0; key = seed). It is kept when (word >> 8) >= dropout_threshold(rate), i.e. when its
// 24-bit uniform u = (word >> 8) / 2^24 satisfies u >= rate; so P(keep) = 1 - rate up to 2^-24.
TRAINER_HD_INLINE uint32_t dropout_threshold(float rate) {
  double t = double(rate) * 16777216.0;
  uint32_t i = uint32_t(t);
  return double(i) < t ? i + 1 : i;  // ceil
}

TRAINER_HD_INLINE Philox4 dropout_words(uint64_t group, uint64_t seed) {
  return philox4x32(uint32_t(group), uint32_t(group >> 32), 0u, 0u, uint32_t(seed), uint32_t(seed >> 32));
}

// Whether the element whose word is `word` is kept (threshold: dropout_threshold(rate)).
TRAINER_HD_INLINE bool dropout_keep(uint32_t word, uint32_t threshold) { return (word >> 8) >= threshold; }

// Inverted dropout's factor 1 / (1 - rate), and an element's value (forward x, backward dy).
TRAINER_HD_INLINE float dropout_scale(float rate) { return 1.0f / (1.0f - rate); }
TRAINER_HD_INLINE float dropout_apply(bool keep, float v, float scale) { return keep ? v * scale : 0.0f; }

}  // namespace trainer
