// Host/device markers for the kernel math headers that the CPU and CUDA backends share (plain C++ for g++, __host__ __device__ under nvcc), and products rounded once on both.
#pragma once

// The per-element and per-partial arithmetic of the hand-written CUDA kernels lives in headers
// under core/ops/math/ (batchnorm_math.h, pool_math.h, column_reduce.h, ...), written once as
// functions that nvcc compiles for both sides and g++ compiles as ordinary inline functions. The
// CPU kernels call the same functions where they compute the same formula, and
// tests/unit/ops/kernel_math_*_test.cpp check them on the host against the float64 references,
// so a kernel that has never run on a GPU still has its arithmetic tested; what stays in the .cu
// files is launch geometry and memory movement.
//
//   TRAINER_HD         a function callable on host and device (templates, out-of-line helpers)
//   TRAINER_HD_INLINE  the same, inline (and forced inline on the device): the usual choice
#if defined(__CUDACC__)
#define TRAINER_HD __host__ __device__
#define TRAINER_HD_INLINE __host__ __device__ __forceinline__
#else
#define TRAINER_HD
#define TRAINER_HD_INLINE inline
#endif

namespace trainer {

// A product or quotient rounded once, never contracted with a neighbour into a fused multiply-add
// (nvcc and g++ -march=native both contract by default), so the host and the device round alike.
template <class T>  // float or double
TRAINER_HD_INLINE T mul_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(double)) return __dmul_rn(a, b);
  else return __fmul_rn(a, b);
#else
  volatile T p = a * b;
  return p;
#endif
}
TRAINER_HD_INLINE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  volatile float q = a / b;
  return q;
#endif
}

}  // namespace trainer
