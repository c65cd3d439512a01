// Shape formatting and the element-count overflow error.
#include "core/tensor/shape.h"

#include <stdexcept>

namespace trainer {

void Shape::overflow() const {
  throw std::overflow_error("shape " + str() + " has more elements than a 64-bit count can hold");
}

std::string Shape::str() const {
  std::string s;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims_[i]);
  }
  return s.empty() ? "scalar" : s;
}

std::string Shape::keras_str() const {
  std::string s = "(None";
  for (int64_t d : dims_) s += ", " + std::to_string(d);
  return s + ")";
}

}  // namespace trainer
