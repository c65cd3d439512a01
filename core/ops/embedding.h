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
#include "core/ops/step_scalars.h"

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

// The first bad id of a deferred check (EmbeddingKernel::Check::Deferred), noted in a step's sums
// unless an earlier one was (the host's note; CUDA's is a kernel doing the same).
inline void note_bad_id(LossSums& s, int64_t flat, float v, const Shape& ids, int64_t vocab) {
  if (s.bad_id_at >= 0) return;
  s.bad_id_at = flat;
  s.bad_id = v;
  s.bad_id_vocab = vocab;
  s.bad_id_cols = ids.rank() >= 2 ? int32_t(ids.dims().back()) : 0;
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

// bad_id_message of a deferred check's note (the ids' leading dimensions as one: [row, column]).
inline std::string bad_id_message(const LossSums& s) {
  const int64_t at = s.bad_id_at, cols = s.bad_id_cols;
  const Shape shape = cols > 0 ? Shape{at / cols + 1, cols} : Shape{at + 1};
  return bad_id_message(s.bad_id, at, shape, s.bad_id_vocab);
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
  // data, not a bug) naming the first such value and its position in ids (bad_id_message). How the
  // ids are checked: Now (the throw above; a GPU waits for its result), Deferred (a recorded step,
  // which cannot wait: the first bad id noted in `sums` where the kernels run, for the host to throw
  // when it reads the step: StepStats), or Trusted (ids made by the caller, e.g. positions).
  enum class Check { Now, Deferred, Trusted };
  void forward(const Tensor& ids, const Tensor& w, Tensor& y, Check how = Check::Now, LossSums* sums = nullptr) {
    check("w", ids, w);
    ck_.shape("y", y, embedding::output_shape(ids.shape(), p_));
    if (how == Check::Deferred && sums == nullptr) ck_.fail("a deferred check of the ids needs the step's sums");
    forward_impl(ids, w, y, how, sums);
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
  virtual void forward_impl(const Tensor& ids, const Tensor& w, Tensor& y, Check how, LossSums* sums) = 0;
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
