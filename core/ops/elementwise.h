// Element-wise op family: sum of tensors, accumulate, scale, channel concat/split, steps reversed, dropout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/step_scalars.h"

namespace trainer {

// Shape logic shared by the backends' element-wise kernels.
namespace elementwise {

// [rows, width] view of a tensor whose last axis is `width`.
inline int64_t rows_of(const Tensor& t) {
  return t.shape().rank() ? t.numel() / std::max<int64_t>(t.shape().back(), 1) : 1;
}

// Leading dimensions (all but the last) agree.
inline bool same_lead(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank() || a.rank() == 0) return false;
  for (size_t i = 0; i + 1 < a.rank(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// The concat inputs' widths add up to y's.
inline void check_concat_width(int64_t inputs, int64_t width) {
  if (inputs != width) shape_checks::fail("concat: inputs have ", inputs, " channels in all, y has ", width);
}

// The width of each split output in dy's last axis (dy of rank >= 1). An undefined output is
// skipped, but its width is needed for the offsets of the others: it is its shape's last axis when
// it carries one (Tensor::view(nullptr, shape, ...)), otherwise the remainder when it is the only
// one without a shape.
inline std::vector<int64_t> split_widths(const Tensor& dy, const std::vector<Tensor*>& dxs) {
  using shape_checks::fail;
  const int64_t width = dy.shape().back();
  std::vector<int64_t> w(dxs.size(), -1);
  int64_t known = 0, unknown = 0;
  for (size_t i = 0; i < dxs.size(); ++i) {
    const Tensor* t = dxs[i];
    if (t && t->shape().rank() > 0) {
      if (!same_lead(t->shape(), dy.shape()))
        fail("split: output ", i, " [", t->shape().str(), "] does not match dy [", dy.shape().str(),
             "] outside the last axis");
      w[i] = t->shape().back();
      known += w[i];
    } else {
      if (t && t->defined()) fail("split: output ", i, " is defined but has no shape");
      ++unknown;
    }
  }
  if (unknown > 1) fail("split: ", unknown, " skipped outputs carry no shape, so the offsets are unknown");
  if (unknown == 1)
    for (auto& v : w)
      if (v < 0) v = width - known;
  if (unknown == 0 && known != width) fail("split: outputs have ", known, " channels in all, dy has ", width);
  if (unknown == 1 && known > width) fail("split: outputs have ", known, " channels, more than dy's ", width);
  return w;
}

// A [rows, width] tensor's place in a concatenation: columns [off, off + width) of the wide
// tensor's last axis (concat's y, split's dy).
struct Segment {
  void* data;
  int64_t off, width;
};

// Whether `narrow` already is columns [off, ...) of `wide` (contiguous): a view of those columns
// (strided, unless it spans them all), so a concat's input written in place by its producer (or a
// split's output read in place by its consumer), which concat and split leave alone.
inline bool in_place(const Tensor& narrow, const Tensor& wide, int64_t off) {
  return narrow.defined() && narrow.row_stride() == wide.shape().back() &&
         narrow.data() == static_cast<const char*>(wide.data()) + off * int64_t(dtype_size(wide.dtype()));
}

}  // namespace elementwise

struct ElementwiseParams {};

class ElementwiseKernel {
 public:
  using Params = ElementwiseParams;
  static constexpr const char* kName = "elementwise";
  virtual ~ElementwiseKernel() = default;
  ElementwiseKernel(const ElementwiseKernel&) = delete;
  ElementwiseKernel& operator=(const ElementwiseKernel&) = delete;

  // Element types: f32, or bf16 / f16 (mixed precision activations) where noted. Low-precision
  // values are computed in f32 and rounded to nearest even once, when stored. The messages name
  // the method ("add: input 2 aliases the output").

  // Whether add() takes inputs of float types other than y's: each read as its value (a low type
  // widened exactly), summed in f32 in input order, rounded once to y's type.
  virtual bool adds_mixed() const { return false; }
  // y = sum of xs (all of y's shape and float type, or any float type where adds_mixed()). Inputs 0
  // and 1 may be y, later ones not.
  void add(const std::vector<const Tensor*>& xs, Tensor& y) {
    const shape_checks::Checks ck("add", dev_);
    ck.floating("y", y);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i]) ck.fail("input ", i, " is null");
      const std::string name = "input " + std::to_string(i);
      if (adds_mixed() && xs[i]->dtype() != y.dtype()) {
        ck.floating(name.c_str(), *xs[i]);
        ck.has_shape(name.c_str(), *xs[i], y.shape());
        if (xs[i]->data() == y.data()) ck.fail(name, " aliases the output");
      } else {
        ck.like(name.c_str(), *xs[i], y, y.shape());
      }
      if (i >= 2 && xs[i]->data() == y.data()) ck.fail("input ", i, " aliases the output");
    }
    add_impl(xs, y);
  }
  // y += x (same shape; each of a float type, independently)
  void accumulate(const Tensor& x, Tensor& y) {
    const shape_checks::Checks ck("accumulate", dev_);
    ck.floating("y", y);
    ck.floating("x", x);
    ck.has_shape("x", x, y.shape());
    accumulate_impl(x, y);
  }
  // y = x converted to y's type (each of a float type; a copy when they agree). The element
  // counts must agree, the shapes need not (a flat copy: the tests widen a [256, 256] tensor into
  // [65536]). Types of different sizes cannot share memory (in place would overwrite elements not
  // yet read).
  void convert(const Tensor& x, Tensor& y) {
    const shape_checks::Checks ck("convert", dev_);
    ck.floating("x", x);
    ck.floating("y", y);
    ck.same_numel("x", x, "y", y);
    if (x.dtype() != y.dtype() && x.numel() && x.data() == y.data())
      ck.fail("x (", dtype_name(x.dtype()), ") and y (", dtype_name(y.dtype()), ") share memory");
    convert_impl(x, y);
  }
  // y = a * y (f32)
  void scale(Tensor& y, float a) {
    shape_checks::Checks("scale", dev_).dtype("y", y, DType::F32);
    scale_impl(y, a);
  }
  // y [C, R] = x [R, C] transposed (f32; no aliasing): a tied kernel's view of an embedding table.
  void transpose(const Tensor& x, Tensor& y) {
    const shape_checks::Checks ck("transpose", dev_);
    ck.dtype("x", x, DType::F32);
    ck.has_rank("x", x, 2);
    ck.shape("y", y, {x.dim(1), x.dim(0)});
    if (x.numel() && x.data() == y.data()) ck.fail("x and y share memory");
    transpose_impl(x.dim(0), x.dim(1), x, y);
  }
  // y = x with its steps in reverse order: y[n, t] = x[n, T - 1 - t] for x [N, T, ...] (rank >= 2,
  // any float type, y of x's shape and type, no aliasing): Keras's go_backwards, the backward half
  // of a bidirectional layer. A copy of whole rows: the same bits on every backend.
  void reverse_steps(const Tensor& x, Tensor& y) {
    const shape_checks::Checks ck("reverse_steps", dev_);
    ck.floating("x", x);
    if (x.shape().rank() < 2) ck.fail("x must have rank >= 2 (batch, steps, ...), got [", x.shape().str(), "]");
    ck.like("y", y, x, x.shape());
    if (x.numel() && x.data() == y.data()) ck.fail("x and y share memory");
    const int64_t n = x.dim(0), t = x.dim(1);
    reverse_steps_impl(n, t, n * t != 0 ? x.numel() / (n * t) : 0, x, y);
  }
  // Concatenate along the last axis: y [..., sum C_i] (all of y's float type, equal outside the
  // last axis). An input that is already its columns of y (elementwise::in_place) is not copied.
  void concat(const std::vector<const Tensor*>& xs, Tensor& y) {
    const shape_checks::Checks ck("concat", dev_);
    ck.floating("y", y);
    if (y.shape().rank() == 0) ck.fail("y must have rank >= 1");
    std::vector<elementwise::Segment> segs;
    int64_t off = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i]) ck.fail("input ", i, " is null");
      const Tensor& x = *xs[i];
      const bool there = elementwise::in_place(x, y, off);
      (there ? ck.rows_strided() : ck).dtype(("input " + std::to_string(i)).c_str(), x, y.dtype());
      if (!elementwise::same_lead(x.shape(), y.shape()))
        ck.fail("input ", i, " [", x.shape().str(), "] does not match y [", y.shape().str(), "] outside the last axis");
      if (!there) segs.push_back({x.data(), off, x.shape().back()});
      off += x.shape().back();
    }
    elementwise::check_concat_width(off, y.shape().back());
    concat_impl(segs, y);
  }
  // The inverse: slices of dy's last axis into dxs (undefined entries are skipped, as are those
  // already their columns of dy: elementwise::in_place; dy's type)
  void split(const Tensor& dy, const std::vector<Tensor*>& dxs) {
    const shape_checks::Checks ck("split", dev_);
    ck.floating("dy", dy);
    if (dy.shape().rank() == 0) ck.fail("dy must have rank >= 1");
    const std::vector<int64_t> w = elementwise::split_widths(dy, dxs);
    std::vector<elementwise::Segment> segs;
    int64_t off = 0;
    for (size_t i = 0; i < dxs.size(); ++i) {
      if (dxs[i] && dxs[i]->defined()) {
        const bool there = elementwise::in_place(*dxs[i], dy, off);
        (there ? ck.rows_strided() : ck).dtype(("output " + std::to_string(i)).c_str(), *dxs[i], dy.dtype());
        if (!there) segs.push_back({dxs[i]->data(), off, w[i]});
      }
      off += w[i];
    }
    split_impl(dy, segs);
  }

 protected:
  ElementwiseKernel(const OpContext& c, const Params&) : dev_(c.device()) {}
  // Called with checked arguments only.
  virtual void add_impl(const std::vector<const Tensor*>& xs, Tensor& y) = 0;
  virtual void accumulate_impl(const Tensor& x, Tensor& y) = 0;
  virtual void convert_impl(const Tensor& x, Tensor& y) = 0;
  virtual void scale_impl(Tensor& y, float a) = 0;
  virtual void transpose_impl(int64_t rows, int64_t cols, const Tensor& x, Tensor& y) = 0;
  // x, y [n, t, width] (width in elements of x's type).
  virtual void reverse_steps_impl(int64_t n, int64_t t, int64_t width, const Tensor& x, Tensor& y) = 0;
  // segs: the inputs' places in y's last axis, in order.
  virtual void concat_impl(const std::vector<elementwise::Segment>& segs, Tensor& y) = 0;
  // segs: the defined outputs' places in dy's last axis.
  virtual void split_impl(const Tensor& dy, const std::vector<elementwise::Segment>& segs) = 0;

 private:
  Device dev_;
};

struct DropoutParams {
  float rate = 0.5f;
};

class DropoutKernel {
 public:
  using Params = DropoutParams;
  static constexpr const char* kName = "dropout";
  virtual ~DropoutKernel() = default;
  DropoutKernel(const DropoutKernel&) = delete;
  DropoutKernel& operator=(const DropoutKernel&) = delete;

  // Inverted dropout: y = x * keep / (1 - rate), f32. The keep mask is a pure function of
  // (seed, element index) (counter-based RNG), so backends and runs agree bit for bit; the mask
  // (u8) is saved for backward. A mask of x's size drops elements; a mask [N, C] for x [N, ..., C]
  // drops whole channels (Keras's SpatialDropout1D/2D: channel c of sample n kept or dropped at
  // every position), each the bit the elements' mask of an [N, C] tensor would have.
  void forward(const Tensor& x, Tensor& y, Tensor& mask, uint64_t seed) { forward(x, y, mask, DropoutSeed{seed, nullptr}); }
  // The same with the seed read where the kernel runs (a recorded step: DropoutSeed::step).
  void forward(const Tensor& x, Tensor& y, Tensor& mask, DropoutSeed seed) {
    ck_.dtype("x", x, DType::F32);
    ck_.shape("y", y, x.shape());
    forward_impl(x, y, mask, seed, channels(mask, x.shape()));
  }
  void backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
    ck_.dtype("dy", dy, DType::F32);
    ck_.shape("dx", dx, dy.shape());
    backward_impl(dy, mask, dx, channels(mask, dy.shape()));
  }

 protected:
  DropoutKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (!(p.rate >= 0.0f && p.rate < 1.0f)) ck_.fail("rate must be in [0, 1), got ", p.rate);
  }
  // Called with checked arguments only. `channels`: 0 for a mask of the elements; C for a mask
  // [N, C] of x [N, P·C] (element i's bit: mask[(i / (P·C))·C + i % C]; P >= 1).
  virtual void forward_impl(const Tensor& x, Tensor& y, Tensor& mask, DropoutSeed seed, int64_t channels) = 0;
  virtual void backward_impl(const Tensor& dy, const Tensor& mask, Tensor& dx, int64_t channels) = 0;

  const Params p_;

 private:
  int64_t channels(const Tensor& mask, const Shape& s) const {
    ck_.dtype("mask", mask, DType::U8);
    if (mask.numel() == s.numel() && !(mask.shape().rank() == 2 && s.rank() > 2)) return 0;
    if (mask.shape().rank() == 2 && s.rank() >= 2 && mask.dim(0) == s[0] && mask.dim(1) == s.back()) return s.back();
    ck_.fail("mask [", mask.shape().str(), "] is neither x's size nor [N, C] of x [", s.str(), "]");
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
