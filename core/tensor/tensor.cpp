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

Tensor Tensor::strided_view(void* data, const Shape& s, DType t, Device d, int64_t row_stride) {
  if (s.rank() == 0 || row_stride < s.back())
    throw std::logic_error(fmt::format("a strided view of [{}] needs rows at least {} apart, got {}", s.str(),
                                       s.rank() ? s.back() : 0, row_stride));
  Tensor x = view(data, s, t, d);
  if (row_stride != s.back()) x.row_stride_ = row_stride;
  return x;
}

Tensor Tensor::reshape(const Shape& s) const {
  if (s.numel() != numel() || (!contiguous() && (s.rank() == 0 || s.back() != shape_.back())))
    throw std::logic_error(
        fmt::format("cannot reshape {}{} to {}", shape_.str(), contiguous() ? "" : " (strided)", s.str()));
  Tensor x = *this;
  x.shape_ = s;
  return x;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  if (shape_.rank() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw std::logic_error(fmt::format("bad slice [{}, {}) of {}", begin, end, shape_.str()));
  Tensor x = *this;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;  // elements of one leading index
  if (!contiguous() && shape_.back()) row = row / shape_.back() * row_stride_;
  x.data_ = static_cast<char*>(data_) + size_t(begin * row) * dtype_size(dtype_);
  x.shape_[0] = end - begin;
  return x;
}

}  // namespace trainer
