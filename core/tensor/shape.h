// Shape: the dimensions of a tensor (activations are NHWC, channels last).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace trainer {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims_(d) {}
  explicit Shape(std::vector<int64_t> d) : dims_(std::move(d)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  int64_t back() const { return dims_.back(); }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Throws std::overflow_error when the product does not fit in int64 (a config can ask for
  // that: the check turns undefined behaviour into an error the caller can report).
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_)
      if (__builtin_mul_overflow(n, d, &n)) overflow();
    return n;
  }
  // The same shape with a leading batch dimension.
  Shape with_batch(int64_t n) const {
    std::vector<int64_t> d{n};
    d.insert(d.end(), dims_.begin(), dims_.end());
    return Shape(std::move(d));
  }
  // The shape without its leading (batch) dimension.
  Shape without_batch() const { return Shape(std::vector<int64_t>(dims_.begin() + 1, dims_.end())); }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  // "32x32x96" (no batch dimension is implied).
  std::string str() const;
  // Keras style with a free batch dimension: "(None, 32, 32, 96)".
  std::string keras_str() const;

 private:
  [[noreturn]] void overflow() const;
  std::vector<int64_t> dims_;
};

}  // namespace trainer
