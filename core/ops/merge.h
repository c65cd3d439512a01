// Merge op family: Keras's Subtract, Average, Maximum and Minimum of inputs of one shape, element by element, and each input's gradient.
#pragma once
#include <string>
#include <vector>

#include "core/ops/math/merge_math.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct MergeParams {
  MergeMode mode = MergeMode::Average;
};

class MergeKernel {
 public:
  using Params = MergeParams;
  static constexpr const char* kName = "merge";
  static constexpr int kMaxInputs = merge_math::kMaxInputs;
  virtual ~MergeKernel() = default;
  MergeKernel(const MergeKernel&) = delete;
  MergeKernel& operator=(const MergeKernel&) = delete;

  // y = the inputs merged at each element (merge_math.h): Subtract takes exactly two inputs, the
  // others 2 to kMaxInputs; all of y's shape and float type, computed in f32 and rounded once to
  // it. y aliases no input.
  void forward(const std::vector<const Tensor*>& xs, Tensor& y) {
    check_inputs(xs, y, "y");
    forward_impl(xs, y);
  }
  // dxs[i] = input i's gradient (merge_math::gradient; Maximum and Minimum pick again from xs);
  // an undefined or null entry is skipped. Each of dy's shape and type, aliasing no input, dy or
  // another gradient.
  void backward(const std::vector<const Tensor*>& xs, const Tensor& dy, const std::vector<Tensor*>& dxs) {
    check_inputs(xs, dy, "dy");
    if (dxs.size() != xs.size()) ck_.fail(xs.size(), " inputs but ", dxs.size(), " gradients");
    for (size_t i = 0; i < dxs.size(); ++i) {
      if (!dxs[i] || !dxs[i]->defined()) continue;
      const std::string name = "gradient " + std::to_string(i);
      ck_.like(name.c_str(), *dxs[i], dy, dy.shape());
      if (dxs[i]->numel() == 0) continue;
      if (dxs[i]->data() == dy.data()) ck_.fail(name, " aliases dy");
      for (size_t j = 0; j < xs.size(); ++j)
        if (dxs[i]->data() == xs[j]->data()) ck_.fail(name, " aliases input ", j);
      for (size_t j = 0; j < i; ++j)
        if (dxs[j] && dxs[j]->defined() && dxs[j]->data() == dxs[i]->data()) ck_.fail(name, " aliases gradient ", j);
    }
    backward_impl(xs, dy, dxs);
  }

 protected:
  MergeKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {}
  // Called with checked arguments only.
  virtual void forward_impl(const std::vector<const Tensor*>& xs, Tensor& y) = 0;
  virtual void backward_impl(const std::vector<const Tensor*>& xs, const Tensor& dy, const std::vector<Tensor*>& dxs) = 0;

  // The element pointers of the inputs and of the wanted gradients (dxs empty: none), for the
  // backends' loops and kernels.
  template <class T>
  static merge_math::Pointers<T> pointers(const std::vector<const Tensor*>& xs, const std::vector<Tensor*>& dxs) {
    merge_math::Pointers<T> p{};
    p.n = int(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      p.x[i] = static_cast<const T*>(xs[i]->data());
      const bool want = i < dxs.size() && dxs[i] && dxs[i]->defined();
      p.dx[i] = want ? static_cast<T*>(dxs[i]->data()) : nullptr;
    }
    return p;
  }

  const Params p_;

 private:
  // The inputs' count (Subtract: 2; else 2 to kMaxInputs), shapes and types (those of `t`), and
  // that `t` (y or dy) is none of them.
  void check_inputs(const std::vector<const Tensor*>& xs, const Tensor& t, const char* name) const {
    ck_.floating(name, t);
    const size_t n = xs.size();
    if (p_.mode == MergeMode::Subtract && n != 2) ck_.fail("subtract takes exactly 2 inputs, got ", n);
    if (n < 2 || n > size_t(kMaxInputs)) ck_.fail("takes 2 to ", kMaxInputs, " inputs, got ", n);
    for (size_t i = 0; i < n; ++i) {
      if (!xs[i]) ck_.fail("input ", i, " is null");
      const std::string in = "input " + std::to_string(i);
      ck_.like(in.c_str(), *xs[i], t, t.shape());
      if (t.numel() && xs[i]->data() == t.data()) ck_.fail(in, " aliases ", name);
    }
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
