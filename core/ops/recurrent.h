// The recurrent op families' shared checks (lstm, gru, simple_rnn): x [N, T, F] and the weights' shapes, the output's shape, and the record of the training forward a backward needs.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/ops/shape_checks.h"

namespace trainer::recurrent {

struct Dims {
  int64_t n, t, f, u;
};

// Every step's h ([N, T, U], return_sequences) or the last one ([N, U]).
inline Shape output_shape(const Dims& d, bool sequences) {
  return sequences ? Shape{d.n, d.t, d.u} : Shape{d.n, d.u};
}

// x [N, T, F] f32 with T, F >= 1, w [F, gates·U], r [U, gates·U].
inline Dims check(const shape_checks::Checks& ck, const Tensor& x, const Tensor& w, const Tensor& r, int64_t units,
                  int64_t gates) {
  ck.dtype("x", x, DType::F32);
  if (x.shape().rank() != 3) ck.fail("x must be [batch, steps, features], got [", x.shape().str(), "]");
  const Dims d{x.dim(0), x.dim(1), x.dim(2), units};
  if (d.t < 1 || d.f < 1) ck.fail("x [", x.shape().str(), "] has no steps or no features");
  ck.shape("w", w, {d.f, gates * d.u});
  ck.shape("r", r, {d.u, gates * d.u});
  return d;
}

// Whether the kernel's workspace holds a training forward, and of which input shape: a backward
// needs one of its own x's shape (an inference forward keeps nothing).
class Kept {
 public:
  void forget() { kept_ = false; }
  void keep(const Dims& d, bool training) {
    if (training && d.n > 0) {
      kept_ = true;
      dims_ = d;
    }
  }
  // std::logic_error "<op>: backward without a training forward of this input shape [..]".
  void require(const Dims& d, const Tensor& x, const char* op) const {
    if (d.n > 0 && (!kept_ || dims_.n != d.n || dims_.t != d.t || dims_.f != d.f))
      throw std::logic_error(std::string(op) + ": backward without a training forward of this input shape [" +
                             x.shape().str() + "]");
  }

 private:
  bool kept_ = false;
  Dims dims_{};
};

}  // namespace trainer::recurrent
