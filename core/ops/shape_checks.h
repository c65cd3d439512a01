// Argument checks that every op header runs once before a backend computes (one message style, std::invalid_argument; also builds under nvcc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/tensor/tensor.h"

namespace trainer::shape_checks {

// Throws std::invalid_argument with the arguments written one after another (integers, floats and
// strings only: the same words on every backend).
template <class... A>
[[noreturn]] void fail(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  throw std::invalid_argument(o.str());
}

// {rows, C}: the [rows, C] view of a tensor whose last axis is C (rows = 0 when C == 0).
inline std::pair<int64_t, int64_t> rows_by_last(const Tensor& t) {
  int64_t C = t.shape().back();
  return {C ? t.numel() / C : 0, C};
}

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Whether a tensor on `t` is memory a kernel of `kernel` reads: the same GPU, or host memory for a
// CPU kernel (every CPU replica addresses the one host memory, whatever its index).
inline bool reachable(Device t, Device kernel) {
  return t.kind == kernel.kind && (kernel.is_cpu() || t.index == kernel.index);
}

// The checks of one op's calls: the op's name starts every message, and every tensor must be on
// the kernel's device and contiguous (rows_strided() lets an op take a strided view where its
// kernels allow). Each check names the argument it refuses:
//   "conv2d: w has shape [3x3x4x8], expected [3x3x2x8]".
class Checks {
 public:
  Checks(const char* op, Device dev) : op_(op), dev_(dev) {}

  const char* op() const { return op_; }
  Device device() const { return dev_; }

  template <class... A>
  [[noreturn]] void fail(const A&... a) const {
    shape_checks::fail(op_, ": ", a...);
  }
  // A backward asked to add its input gradient into dx (`add`): the backend can (`can`; `why` ends
  // the message when it cannot), and dx is defined.
  void add_into(bool add, bool can, const Tensor& dx, const char* why = "") const {
    if (add && !can) fail("this backend cannot add the input gradient into dx", why);
    if (add && !dx.defined()) fail("dx is undefined: nothing to add the input gradient into");
  }

  void defined(const char* name, const Tensor& t) const {
    if (!t.defined()) fail(name, " is undefined");
    if (!t.contiguous() && !strided_ok_)
      fail(name, " is a strided view (rows ", t.row_stride(), " elements apart); this op takes contiguous tensors");
  }
  // The same checks, where `t` may be a strided view whose rows hold its last axis (Tensor::row_stride).
  Checks rows_strided() const {
    Checks c = *this;
    c.strided_ok_ = true;
    return c;
  }
  void on_device(const char* name, const Tensor& t) const {
    if (!reachable(t.device(), dev_))
      fail(name, " is on ", t.device().str(), ", not ", dev_.is_cpu() ? std::string("the CPU") : dev_.str());
  }
  // Defined, of type `dt`, on the device.
  void dtype(const char* name, const Tensor& t, DType dt) const {
    defined(name, t);
    if (t.dtype() != dt) fail(name, " must be ", dtype_name(dt), ", got ", dtype_name(t.dtype()));
    on_device(name, t);
  }
  // Defined, of a floating type (f32, or bf16 / f16 under mixed precision), on the device; returns
  // the type. (A backend without some type refuses it itself, as a capability.)
  DType floating(const char* name, const Tensor& t) const {
    defined(name, t);
    if (!is_float(t.dtype())) fail(name, " must be f32, bf16 or f16, got ", dtype_name(t.dtype()));
    on_device(name, t);
    return t.dtype();
  }
  void has_shape(const char* name, const Tensor& t, const Shape& want) const {
    if (t.shape() != want) fail(name, " has shape [", t.shape().str(), "], expected [", want.str(), "]");
  }
  // Of type `dt` and shape `want`.
  void shape(const char* name, const Tensor& t, const Shape& want, DType dt = DType::F32) const {
    dtype(name, t, dt);
    has_shape(name, t, want);
  }
  // Of `like`'s type (the activations of one call share a type) and of shape `want`.
  void like(const char* name, const Tensor& t, const Tensor& like, const Shape& want) const {
    shape(name, t, want, like.dtype());
  }
  void has_rank(const char* name, const Tensor& t, size_t rank) const {
    if (t.shape().rank() != rank) fail(name, " must have rank ", rank, ", got [", t.shape().str(), "]");
  }
  void min_rank(const char* name, const Tensor& t, size_t rank) const {
    if (t.shape().rank() < rank) fail(name, " must have rank >= ", rank, ", got [", t.shape().str(), "]");
  }
  void same_numel(const char* a, const Tensor& ta, const char* b, const Tensor& tb) const {
    if (ta.numel() != tb.numel())
      fail(a, " [", ta.shape().str(), "] and ", b, " [", tb.shape().str(), "] differ in size");
  }
  // An f32 [C] vector; `optional` ones may be undefined.
  void vec(const char* name, const Tensor& t, int64_t C, bool optional) const {
    if (optional && !t.defined()) return;
    shape(name, t, {C});
  }

 private:
  const char* op_;
  Device dev_;
  bool strided_ok_ = false;
};

}  // namespace trainer::shape_checks
