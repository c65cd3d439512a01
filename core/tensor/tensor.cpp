// Tensor construction, reshape and slicing.
#include "core/tensor/tensor.h"

#include <fmt/format.h>

namespace trainer {

Tensor Tensor::empty(const Shape& s, DType t, Allocator& a) {
  Tensor x;
  x.storage_ = std::make_shared<Storage>(a, size_t(s.numel()) * dtype_size(t));
  x.data_ = x.storage_->data();
  x.shape_ = s;
  x.dtype_ = t;
  x.device_ = a.device();
  return x;
}

Tensor Tensor::view(void* data, const Shape& s, DType t, Device d) {
  Tensor x;
  x.data_ = data;
  x.shape_ = s;
  x.dtype_ = t;
  x.device_ = d;
  return x;
}

Tensor Tensor::reshape(const Shape& s) const {
  if (s.numel() != numel())
    throw std::logic_error(fmt::format("cannot reshape {} to {}", shape_.str(), s.str()));
  Tensor x = *this;
  x.shape_ = s;
  return x;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  if (shape_.rank() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw std::logic_error(fmt::format("bad slice [{}, {}) of {}", begin, end, shape_.str()));
  Tensor x = *this;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  x.data_ = static_cast<char*>(data_) + size_t(begin * row) * dtype_size(dtype_);
  x.shape_[0] = end - begin;
  return x;
}

}  // namespace trainer
