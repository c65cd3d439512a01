// Storage types of the CUDA kernels (f32, bf16, f16): loads to float, rounded stores, 16-byte vectors, the dispatch on DType.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/math/half_bits.h"

// Mixed precision on the GPU keeps activations in bf16 or f16 between the layers that allow it;
// every kernel loads them into float registers, computes in float (accumulating in float or
// double), and rounds once, to nearest even, when it stores (as the CPU backend's bf16 path and
// PyTorch's autocast kernels). Templated kernels take the storage type T; one definition serves
// the three types, so the f32 path and the rounded paths are the same arithmetic.

namespace trainer::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

// The conversions are half_bits.h's bit manipulations (host-tested on every 16-bit pattern and
// tie), not the cuda_bf16/cuda_fp16 intrinsics: the GPU rounds exactly as the CPU and the tests do.
__host__ __device__ __forceinline__ uint16_t bits_of(bf16 v) { return static_cast<__nv_bfloat16_raw>(v).x; }
__host__ __device__ __forceinline__ uint16_t bits_of(f16 v) { return static_cast<__half_raw>(v).x; }

__host__ __device__ __forceinline__ float to_f32(float v) { return v; }
__host__ __device__ __forceinline__ float to_f32(bf16 v) { return half_bits::f32_from_bf16(bits_of(v)); }
__host__ __device__ __forceinline__ float to_f32(f16 v) { return half_bits::f32_from_f16(bits_of(v)); }

// Round to nearest even (NaN stays NaN; f16 overflows to +-inf from 65520 on, as IEEE says).
template <class T>
__host__ __device__ __forceinline__ T from_f32(float v);
template <>
__host__ __device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  __nv_bfloat16_raw r;
  r.x = half_bits::bf16_from_f32(v);
  return bf16(r);
}
template <>
__host__ __device__ __forceinline__ f16 from_f32<f16>(float v) {
  __half_raw r;
  r.x = half_bits::f16_from_f32(v);
  return f16(r);
}

// A loader for the kernel math headers (load(i) -> float): element i of T storage, widened.
template <class T>
struct Load {
  const T* p;
  __host__ __device__ __forceinline__ float operator()(int64_t i) const { return to_f32(p[i]); }
};

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::F16;
}

template <class T>
inline T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

// Calls f(T{}) with T = float, bf16 or f16 for the tensor's type; anything else (which the op
// headers' checks let through to no kernel) is an invalid_argument naming the op and the tensor.
template <class F>
decltype(auto) dispatch_float(const char* op, const char* name, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(bf16{});
    case DType::F16: return f(f16{});
    default: break;
  }
  fail(op, ": ", name, " must be f32, bf16 or f16, got ", dtype_name(t.dtype()));
}

// ---------------------------------------------------------------------------------------------
// 16-byte vectors: kVec<T> elements of T loaded or stored in one access (4 f32, 8 bf16/f16).

template <class T>
constexpr int kVec = int(16 / sizeof(T));

template <class T>
struct alignas(16) Pack {
  T v[kVec<T>];
};

template <class T>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[kVec<T>]) {
  const Pack<T> k = *reinterpret_cast<const Pack<T>*>(p);
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) out[j] = to_f32(k.v[j]);
}

template <class T>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[kVec<T>]) {
  Pack<T> k;
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) k.v[j] = from_f32<T>(in[j]);
  *reinterpret_cast<Pack<T>*>(p) = k;
}

// ---------------------------------------------------------------------------------------------
// Typed element-wise maps: y[i] = f(x[i]) and y[i] = f(a[i], b[i]) computed in float, each
// operand of its own storage type. The output may alias an input of its type (each element is
// read before it is written, by the same thread). 16-byte packs when every pointer is 16-byte
// aligned and n is a multiple of the pack (all operands of one width), scalar otherwise.

template <class X, class Y, class F>
__global__ void tmap1_kernel(const X* x, Y* y, int64_t n, F f) {
  CUDA_GRID_LOOP(i, n) y[i] = from_f32<Y>(f(to_f32(x[i])));
}

template <class T, class F>
__global__ void tmap1_vec_kernel(const T* x, T* y, int64_t packs, F f) {
  CUDA_GRID_LOOP(i, packs) {
    float v[kVec<T>];
    load_pack(x + i * kVec<T>, v);
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) v[j] = f(v[j]);
    store_pack(y + i * kVec<T>, v);
  }
}

template <class A, class B, class Y, class F>
__global__ void tmap2_kernel(const A* a, const B* b, Y* y, int64_t n, F f) {
  CUDA_GRID_LOOP(i, n) y[i] = from_f32<Y>(f(to_f32(a[i]), to_f32(b[i])));
}

template <class T, class F>
__global__ void tmap2_vec_kernel(const T* a, const T* b, T* y, int64_t packs, F f) {
  CUDA_GRID_LOOP(i, packs) {
    float u[kVec<T>], v[kVec<T>];
    load_pack(a + i * kVec<T>, u);
    load_pack(b + i * kVec<T>, v);
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) u[j] = f(u[j], v[j]);
    store_pack(y + i * kVec<T>, u);
  }
}

template <class X, class Y, class F>
void tmap1(const CudaContext& c, const X* x, Y* y, int64_t n, F f) {
  if (n <= 0) return;
  if constexpr (std::is_same_v<X, Y>) {
    if (n % kVec<X> == 0 && aligned16(x) && aligned16(y)) {
      const int64_t packs = n / kVec<X>;
      TRAINER_LAUNCH((tmap1_vec_kernel<X, F>), grid_for(packs, c), kBlock, c.stream(), x, y, packs, f);
      return;
    }
  }
  TRAINER_LAUNCH((tmap1_kernel<X, Y, F>), grid_for(n, c), kBlock, c.stream(), x, y, n, f);
}

template <class A, class B, class Y, class F>
void tmap2(const CudaContext& c, const A* a, const B* b, Y* y, int64_t n, F f) {
  if (n <= 0) return;
  if constexpr (std::is_same_v<A, Y> && std::is_same_v<B, Y>) {
    if (n % kVec<Y> == 0 && aligned16(a) && aligned16(b) && aligned16(y)) {
      const int64_t packs = n / kVec<Y>;
      TRAINER_LAUNCH((tmap2_vec_kernel<Y, F>), grid_for(packs, c), kBlock, c.stream(), a, b, y, packs, f);
      return;
    }
  }
  TRAINER_LAUNCH((tmap2_kernel<A, B, Y, F>), grid_for(n, c), kBlock, c.stream(), a, b, y, n, f);
}

// A scratch copy of an f32 buffer in the low type T (grown on demand, never shrunk): the operands
// that cuBLAS multiplies on tensor cores under mixed precision (dense, attention).
struct CopyAsIs {
  __device__ float operator()(float v) const { return v; }
};
class LowCopy {
 public:
  template <class T>
  const T* of(CudaContext& c, const float* src, int64_t n) {
    T* p = buf_.as<T>(c, size_t(n));
    tmap1(c, src, p, n, CopyAsIs{});
    return p;
  }

 private:
  Scratch buf_;
};

}  // namespace trainer::cuda
