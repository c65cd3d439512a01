// Embedding's per-element rules, shared by the CPU and CUDA kernels (host and device): which ids are valid, the gather source, the sort key and the per-id gradient sum.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/ops/math/hd.h"

namespace trainer::embedding {

// A float holding a valid id: an integer in [0, V) (NaN fails both comparisons).
TRAINER_HD_INLINE bool valid_id(float v, int64_t vocab) { return v >= 0.0f && v < float(vocab) && v == floorf(v); }

// Forward: element j of position q's output row comes from w[source] (w [V, D]), or is 0 for an
// invalid id (source -1; the kernel then reports the id).
TRAINER_HD_INLINE int64_t gather_source(float id, int64_t vocab, int64_t D, int64_t j) {
  return valid_id(id, vocab) ? int64_t(id) * D + j : -1;
}

// Backward sorts the positions by this key with a stable sort: the id, or V (sorted last, then
// skipped) for an invalid one.
TRAINER_HD_INLINE uint32_t sort_key(float id, int64_t vocab) {
  return valid_id(id, vocab) ? uint32_t(id) : uint32_t(vocab);
}

// After the sort (keys and their positions pos, P of them): sorted index s heads the run of its
// key when it is the run's first and the key is a valid id; column j of that id's dw row is then
// the sum of dy(pos[k]·D + j) over the run, k increasing (positions increasing: the sort is
// stable), in float. Returns false for an index that heads no run.
template <class LoadDy>
TRAINER_HD_INLINE bool segment_sum(const uint32_t* keys, const int32_t* pos, const LoadDy& dy, int64_t P, int64_t D,
                                   int64_t vocab, int64_t s, int64_t j, float& sum) {
  const uint32_t key = keys[s];
  if (int64_t(key) >= vocab || (s > 0 && keys[s - 1] == key)) return false;
  float acc = 0.0f;
  for (int64_t k = s; k < P && keys[k] == key; ++k) acc += dy(int64_t(pos[k]) * D + j);
  sum = acc;
  return true;
}

}  // namespace trainer::embedding
