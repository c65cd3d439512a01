// Tensor: a typed, shaped view on memory of one device; owning (shared storage) or borrowed.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "core/tensor/allocator.h"
#include "core/tensor/device.h"
#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace trainer {

class Storage {
 public:
  Storage(Allocator& a, size_t bytes) : alloc_(&a), bytes_(bytes), ptr_(a.allocate(bytes)) {}
  ~Storage() { alloc_->deallocate(ptr_, bytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  Allocator* alloc_;
  size_t bytes_;
  void* ptr_;
};

class Tensor {
 public:
  Tensor() = default;
  // Fresh storage from `a` (contents uninitialised).
  static Tensor empty(const Shape& s, DType t, Allocator& a);
  static Tensor empty(const Shape& s, DType t = DType::F32) { return empty(s, t, host_allocator()); }
  // A borrowed view on memory someone else owns (e.g. a slice of the flat parameter buffer).
  static Tensor view(void* data, const Shape& s, DType t, Device d);
  // A borrowed view whose rows (the last axis) start `row_stride` elements apart (>= the last
  // axis): a channel slice of a wider NHWC tensor (a concat's inputs written in its output).
  static Tensor strided_view(void* data, const Shape& s, DType t, Device d, int64_t row_stride);

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype_); }
  int64_t dim(size_t i) const { return shape_[i]; }
  // Elements from one row of the last axis to the next; contiguous tensors have the last axis.
  // Only kernels that say so take a tensor that is not contiguous (shape_checks.h).
  int64_t row_stride() const { return row_stride_ ? row_stride_ : (shape_.rank() ? shape_.back() : 1); }
  bool contiguous() const { return row_stride_ == 0; }

  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  float* f32() const { check(DType::F32); return static_cast<float*>(data_); }
  int32_t* i32() const { check(DType::I32); return static_cast<int32_t*>(data_); }

  // Same memory, new shape of equal element count (of a strided view: the same last axis).
  Tensor reshape(const Shape& s) const;
  // Rows [begin, end) of the leading dimension (shares storage; a strided view stays one).
  Tensor slice(int64_t begin, int64_t end) const;

 private:
  void check(DType t) const {
    if (dtype_ != t) throw std::logic_error(std::string("tensor is ") + dtype_name(dtype_) + ", not " + dtype_name(t));
  }
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
  int64_t row_stride_ = 0;  // 0: contiguous
};

}  // namespace trainer
