// Embedding op family: rows of a table w [V, D] looked up by integer ids held in float activations (Keras Embedding).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/hd.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct EmbeddingParams {
  int64_t input_dim = 0;   // V, the vocabulary: ids are 0 .. V-1
  int64_t output_dim = 0;  // D
};

// Shape logic and messages shared by the backends.
namespace embedding {

// ids [...] -> y [..., D]
inline Shape output_shape(const Shape& ids, const EmbeddingParams& p) {
  std::vector<int64_t> d = ids.dims();
  d.push_back(p.output_dim);
  return Shape(std::move(d));
}

// --- Per-element rules of both backends' kernels (host and device).

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

// "embedding: id 12 at [3, 7] is outside the vocabulary [0, 10)" for the element at flat index
// `flat` of ids of shape `s` (a non-integer id is named as such).
inline std::string bad_id_message(float v, int64_t flat, const Shape& s, int64_t vocab) {
  std::vector<int64_t> at(s.rank());
  for (size_t k = s.rank(); k-- > 0;) {
    at[k] = s[k] ? flat % s[k] : 0;
    flat = s[k] ? flat / s[k] : 0;
  }
  std::string pos;
  for (size_t k = 0; k < at.size(); ++k) pos += (k ? ", " : "") + std::to_string(at[k]);
  std::ostringstream o;
  o << "embedding: id " << v << " at [" << pos << "] is "
    << (v == std::floor(v) ? "outside the vocabulary [0, " + std::to_string(vocab) + ")" : "not an integer");
  return o.str();
}

}  // namespace embedding

class EmbeddingKernel {
 public:
  using Params = EmbeddingParams;
  static constexpr const char* kName = "embedding";
  virtual ~EmbeddingKernel() = default;
  EmbeddingKernel(const EmbeddingKernel&) = delete;
  EmbeddingKernel& operator=(const EmbeddingKernel&) = delete;

  // y[..., :] = w[ids[...], :] (all f32; ids of rank >= 1, w [V, D]). Ids are f32 (the graph's
  // activations) holding integers in [0, V); any other value throws std::runtime_error (bad input
  // data, not a bug) naming the first such value and its position in ids (bad_id_message).
  void forward(const Tensor& ids, const Tensor& w, Tensor& y) {
    check("w", ids, w);
    ck_.shape("y", y, embedding::output_shape(ids.shape(), p_));
    forward_impl(ids, w, y);
  }
  // dw (overwritten) = for each row v, the sum of dy's rows at the positions whose id is v (in
  // position order, so the result is deterministic). Ids are not differentiable.
  void backward(const Tensor& ids, const Tensor& dy, Tensor& dw) {
    check("dw", ids, dw);
    ck_.shape("dy", dy, embedding::output_shape(ids.shape(), p_));
    backward_impl(ids, dy, dw);
  }

 protected:
  EmbeddingKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.input_dim <= 0 || p.output_dim <= 0)
      ck_.fail("input_dim and output_dim must be positive, got ", p.input_dim, " and ", p.output_dim);
  }
  // Called with checked arguments only (the ids' values are the backends' to check).
  virtual void forward_impl(const Tensor& ids, const Tensor& w, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& ids, const Tensor& dy, Tensor& dw) = 0;

  const Params p_;

 private:
  // ids of rank >= 1 and the table (w or dw) [V, D].
  void check(const char* table, const Tensor& ids, const Tensor& w) const {
    ck_.dtype("ids", ids, DType::F32);
    ck_.min_rank("ids", ids, 1);
    ck_.shape(table, w, {p_.input_dim, p_.output_dim});
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
