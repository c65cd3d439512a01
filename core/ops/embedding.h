// Embedding op family: rows of a table w [V, D] looked up by integer ids held in float activations (Keras Embedding).
#pragma once
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/math/embedding_math.h"
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
