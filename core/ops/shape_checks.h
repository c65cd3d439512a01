// Shape checks shared by the CPU and CUDA kernels (plain std::string messages: this header also builds under nvcc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/tensor/tensor.h"

namespace trainer::shape_checks {

// Throws std::invalid_argument with the arguments written one after another (as cpu::fail and
// cuda::fail do; integers and strings only, so both backends word a message the same way).
template <class... A>
[[noreturn]] void fail(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  throw std::invalid_argument(o.str());
}

inline void require_same_numel(const char* op, const char* a, const Tensor& ta, const char* b, const Tensor& tb) {
  if (ta.numel() != tb.numel())
    fail(op, ": ", a, " [", ta.shape().str(), "] and ", b, " [", tb.shape().str(), "] differ in size");
}

inline void require_min_rank(const char* op, const char* name, const Tensor& t, size_t rank) {
  if (t.shape().rank() < rank) fail(op, ": ", name, " must have rank >= ", rank, ", got [", t.shape().str(), "]");
}

// {rows, C}: the [rows, C] view of a tensor whose last axis is C (rows = 0 when C == 0).
inline std::pair<int64_t, int64_t> rows_by_last(const Tensor& t) {
  int64_t C = t.shape().back();
  return {C ? t.numel() / C : 0, C};
}

}  // namespace trainer::shape_checks
