// Shape formatting.
#include "core/tensor/shape.h"

namespace trainer {

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
