// Permute op family: Keras's Permute, a sample's axes reordered (the batch axis stays first); its gradient is the inverse permutation.
#pragma once
#include <vector>

#include "core/ops/math/permute_math.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct PermuteParams {
  // y's sample axis k is x's sample axis dims[k] (0-based over the sample's axes: Keras's dims
  // minus 1); a permutation of 0..rank-1, rank 1 to 3.
  std::vector<int> dims;
};

class PermuteKernel {
 public:
  using Params = PermuteParams;
  static constexpr const char* kName = "permute";
  virtual ~PermuteKernel() = default;
  PermuteKernel(const PermuteKernel&) = delete;
  PermuteKernel& operator=(const PermuteKernel&) = delete;

  // y = x with its sample axes permuted (any float type; a copy of the elements' bits, y not x).
  void forward(const Tensor& x, Tensor& y) {
    const permute_math::Index ix = index(x, "x", false);
    ck_.like("y", y, x, out_shape(x.shape(), false));
    if (x.numel() && y.data() == x.data()) ck_.fail("y aliases x");
    copy_impl(ix, x, y);
  }
  // dx = dy with the inverse permutation (dx not dy).
  void backward(const Tensor& dy, Tensor& dx) {
    const permute_math::Index ix = index(dy, "dy", true);
    ck_.like("dx", dx, dy, out_shape(dy.shape(), true));
    if (dy.numel() && dx.data() == dy.data()) ck_.fail("dx aliases dy");
    copy_impl(ix, dy, dx);
  }

 protected:
  PermuteKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    const size_t r = p.dims.size();
    std::vector<bool> seen(r, false);
    bool ok = r >= 1 && r < size_t(permute_math::kMaxRank);
    for (size_t k = 0; ok && k < r; ++k) {
      ok = p.dims[k] >= 0 && size_t(p.dims[k]) < r && !seen[size_t(p.dims[k])];
      if (ok) seen[size_t(p.dims[k])] = true;
    }
    if (!ok) ck_.fail("dims must be a permutation of a sample's 1 to 3 axes");
  }
  // Called with checked arguments only: out's element e is in's element ix.source(e).
  virtual void copy_impl(const permute_math::Index& ix, const Tensor& in, Tensor& out) = 0;

  const Params p_;

 private:
  // The whole permutation (the batch axis first, fixed), or its inverse.
  std::vector<int> perm(bool inverse) const {
    const int r = int(p_.dims.size());
    std::vector<int> pm(size_t(r + 1), 0);
    for (int k = 0; k < r; ++k) {
      if (inverse) pm[size_t(p_.dims[size_t(k)] + 1)] = k + 1;
      else pm[size_t(k + 1)] = p_.dims[size_t(k)] + 1;
    }
    return pm;
  }
  Shape out_shape(const Shape& in, bool inverse) const {
    const std::vector<int> pm = perm(inverse);
    std::vector<int64_t> d(pm.size());
    for (size_t k = 0; k < pm.size(); ++k) d[k] = in[size_t(pm[k])];
    return Shape(d);
  }
  permute_math::Index index(const Tensor& t, const char* name, bool inverse) const {
    ck_.floating(name, t);
    ck_.has_rank(name, t, p_.dims.size() + 1);
    const std::vector<int> pm = perm(inverse);
    return permute_math::make_index(t.shape().dims().data(), pm.data(), int(pm.size()));
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
