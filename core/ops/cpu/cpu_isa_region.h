// A region of a file compiled for instructions beyond the build's -march (AVX-512, AVX512_BF16), whose code runs only where the CPU has them; and a vector's first-lanes mask.
#pragma once
#include <immintrin.h>

#include <cstdint>

// TRAINER_ISA_BEGIN("avx512f,avx512bf16") ... TRAINER_ISA_END: every function between them is
// compiled for that target. Under GCC 12 the region also silences -Wuninitialized and
// -Wmaybe-uninitialized: GCC takes the _mm512_undefined_*() its unmasked intrinsics pass as an
// unused merge source for an uninitialised read (GCC bug 105593, fixed in 13).
#define TRAINER_ISA_PRAGMA(...) _Pragma(#__VA_ARGS__)
#if defined(__clang__)
#define TRAINER_ISA_BEGIN(isa) TRAINER_ISA_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define TRAINER_ISA_END TRAINER_ISA_PRAGMA(clang attribute pop)
#else
#define TRAINER_ISA_BEGIN(isa)                                       \
  TRAINER_ISA_PRAGMA(GCC push_options)                               \
  TRAINER_ISA_PRAGMA(GCC target(isa))                                \
  TRAINER_ISA_PRAGMA(GCC diagnostic push)                            \
  TRAINER_ISA_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized") \
  TRAINER_ISA_PRAGMA(GCC diagnostic ignored "-Wuninitialized")
#define TRAINER_ISA_END TRAINER_ISA_PRAGMA(GCC diagnostic pop) TRAINER_ISA_PRAGMA(GCC pop_options)
#endif

namespace trainer::cpu {

// The mask of a 16-lane vector's first n lanes (all for n ≥ 16, none for n ≤ 0): a row's tail.
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

}  // namespace trainer::cpu
