// Helpers shared by the hand-written CUDA kernels: messages, checked launches, grid-stride loops, block reductions.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/math/softmax_math.h"

// fmt's compile-time format strings (consteval) do not survive nvcc's host pass, so the .cu files
// build their messages with ostream insertion (cuda::cat) instead of fmt.

namespace trainer::cuda {

// ---------------------------------------------------------------------------------------------
// Host side: messages (the arguments are checked by the op headers, shape_checks.h; what stays in
// the .cu files is what only this backend refuses, such as sizes beyond cuDNN's 32-bit indices).

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  return o.str();
}

template <class... A>
[[noreturn]] void fail(const A&... a) {
  throw std::invalid_argument(cat(a...));
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline bool aligned4(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 3u) == 0; }

// ---------------------------------------------------------------------------------------------
// Launch configuration.

constexpr int kBlock = 256;  // threads per block of the element-wise kernels

// Blocks for a grid-stride loop over n items: enough to fill the GPU (8 blocks of kBlock per SM),
// never more than the items need. Results never depend on the grid size (every kernel's per-item
// arithmetic is independent of which block runs it).
inline unsigned grid_for(int64_t n, const CudaContext& c, int block = kBlock) {
  if (n <= 0) return 0;
  int64_t need = (n + block - 1) / block;
  int64_t cap = int64_t(c.properties().multiProcessorCount > 0 ? c.properties().multiProcessorCount : 1) * 8;
  return unsigned(need < cap ? need : cap);
}

// Threads per block for the one-block-per-row kernels (a multiple of 32, at most 256).
inline unsigned row_block(int64_t width) {
  return width <= 32 ? 32u : width <= 64 ? 64u : width <= 128 ? 128u : 256u;
}

// TRAINER_CUDA_SYNC=1 synchronises after every launch so an asynchronous fault is reported at the
// kernel that caused it (debugging only).
inline bool sync_after_launch() {
  static const bool on = [] {
    const char* e = std::getenv("TRAINER_CUDA_SYNC");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// Launch `kernel<<<grid, block, 0, stream>>>(args...)` and check the launch (and, in sync mode, its
// execution). A grid of 0 blocks launches nothing.
template <class... KArgs, class... Args>
void launch_at(const char* name, const char* file, int line, void (*kernel)(KArgs...), unsigned grid, unsigned block,
               cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "kernel argument count");
  if (grid == 0) return;
  kernel<<<grid, block, 0, stream>>>(static_cast<KArgs>(std::forward<Args>(args))...);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync_after_launch()) e = cudaStreamSynchronize(stream);
  // cudaGetLastError also returns a fault an earlier kernel left (sticky, asynchronous): said so,
  // unless every launch is synchronised (then the fault is this kernel's).
  if (e != cudaSuccess)
    cuda_fail(name, sync_after_launch() ? cudaGetErrorString(e)
                                        : (std::string(cudaGetErrorString(e)) + " (or an earlier kernel's fault, reported at "
                                           "this launch: TRAINER_CUDA_SYNC=1 names the kernel)").c_str(),
              file, line);
}

}  // namespace trainer::cuda

// TRAINER_LAUNCH(kernel, grid, block, stream, args...): a checked launch naming the call site.
#define TRAINER_LAUNCH(kernel, ...) ::trainer::cuda::launch_at(#kernel, __FILE__, __LINE__, kernel, __VA_ARGS__)

// for (int64_t i = first index of this thread; i < n; i += all threads of the grid)
#define CUDA_GRID_LOOP(i, n)                                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, i##_step_ = int64_t(blockDim.x) * gridDim.x; \
       i < int64_t(n); i += i##_step_)

// The same loop in the index type I: int32_t where cuda::with_index_type chose it (the grid's stride,
// at most 8 blocks per SM of kBlock threads, keeps i + stride below 2^31 when n < 2^30).
#define CUDA_GRID_LOOP_T(I, i, n)                                                                        \
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x), i##_step_ = I(blockDim.x) * I(gridDim.x); i < I(n); \
       i += i##_step_)

namespace trainer::cuda {

// f(int32_t{}) when every count is below 2^30, else f(int64_t{}): the index type of the kernels f
// launches. Kernels that divide their element index into coordinates (NHWC n, y, x, c) do it in
// 32 bits then: a GPU emulates a 64-bit division in tens of instructions (the depthwise and padding
// kernels divided four to six times per element; H100, 2026-11-27: ~10x their bytes' time).
template <class F>
void with_index_type(std::initializer_list<int64_t> counts, F&& f) {
  for (int64_t n : counts)
    if (n >= (int64_t(1) << 30)) return f(int64_t{});
  f(int32_t{});
}

}  // namespace trainer::cuda

namespace trainer::cuda {

// ---------------------------------------------------------------------------------------------
// Device side: deterministic block reductions. blockDim.x must be a multiple of 32 (at most 1024)
// and every thread of the block must call them (they contain __syncthreads). The combination order
// is fixed by blockDim.x alone (warp shuffles, then warp 0 over the per-warp results), so results
// are bit-reproducible; no atomics.

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {  // fmaxf: a NaN operand loses (as the CPU's `x > m ? x : m` loop mostly does)
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MinOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; }
};

// Every thread gets the reduction of `v` over the block; `identity` fills the idle lanes of warp 0.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[33];  // [0, 32): one per warp; [32]: the broadcast result
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned nwarps = (blockDim.x + 31u) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();  // a previous reduction's readers of `partial` are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? partial[lane] : identity;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_down_sync(0xffffffffu, w, o));
    if (lane == 0) partial[32] = w;
  }
  __syncthreads();
  return partial[32];
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, SumOp{}, 0.0f); }
__device__ __forceinline__ double block_sum(double v) { return block_reduce(v, SumOp{}, 0.0); }
__device__ __forceinline__ long long block_sum(long long v) { return block_reduce(v, SumOp{}, 0LL); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, MaxOp{}, -INFINITY); }
__device__ __forceinline__ long long block_min(long long v) { return block_reduce(v, MinOp{}, (long long)INT64_MAX); }

// Argmax as the CPU's sequential scan (softmax_math::argmax_better): the first NaN, else the largest
// value at the first index among equals. Idle threads pass (-inf, INT64_MAX), which any element beats.
__device__ __forceinline__ void argmax_combine(float& v, long long& k, float v2, long long k2) {
  if (softmax_math::argmax_better(v2, k2, v, k)) {
    v = v2;
    k = k2;
  }
}

__device__ __forceinline__ long long block_argmax(float v, long long k) {
  __shared__ float pv[32];
  __shared__ long long pk[33];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned nwarps = (blockDim.x + 31u) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float v2 = __shfl_down_sync(0xffffffffu, v, o);
    long long k2 = __shfl_down_sync(0xffffffffu, k, o);
    argmax_combine(v, k, v2, k2);
  }
  __syncthreads();
  if (lane == 0) {
    pv[warp] = v;
    pk[warp] = k;
  }
  __syncthreads();
  if (warp == 0) {
    float w = lane < nwarps ? pv[lane] : -INFINITY;
    long long j = lane < nwarps ? pk[lane] : (long long)INT64_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float w2 = __shfl_down_sync(0xffffffffu, w, o);
      long long j2 = __shfl_down_sync(0xffffffffu, j, o);
      argmax_combine(w, j, w2, j2);
    }
    if (lane == 0) pk[32] = j;
  }
  __syncthreads();
  return pk[32];
}

// Argmax of row[0, C) for the calling block (the first index of the maximum).
__device__ __forceinline__ long long row_argmax(const float* row, int64_t C) {
  float v = -INFINITY;
  long long k = (long long)INT64_MAX;
  if (int64_t(threadIdx.x) < C) {
    v = row[threadIdx.x];
    k = threadIdx.x;
    for (int64_t j = threadIdx.x + blockDim.x; j < C; j += blockDim.x)
      if (softmax_math::argmax_better(row[j], j, v, k)) {
        v = row[j];
        k = j;
      }
  }
  return block_argmax(v, k);
}

// ---------------------------------------------------------------------------------------------
// Element-wise maps y[i] = f(x[i]) and y[i] = f(a[i], b[i]). The output may alias an input (each
// element is read before it is written, by the same thread). float4 is used when every pointer is
// 16-byte aligned and n is a multiple of 4, scalar otherwise.

template <class F>
__global__ void map1_kernel(const float* x, float* y, int64_t n, F f) {
  CUDA_GRID_LOOP(i, n) y[i] = f(x[i]);
}

template <class F>
__global__ void map1_vec_kernel(const float4* x, float4* y, int64_t n4, F f) {
  CUDA_GRID_LOOP(i, n4) {
    float4 v = x[i];
    v.x = f(v.x);
    v.y = f(v.y);
    v.z = f(v.z);
    v.w = f(v.w);
    y[i] = v;
  }
}

template <class F>
__global__ void map2_kernel(const float* a, const float* b, float* y, int64_t n, F f) {
  CUDA_GRID_LOOP(i, n) y[i] = f(a[i], b[i]);
}

template <class F>
__global__ void map2_vec_kernel(const float4* a, const float4* b, float4* y, int64_t n4, F f) {
  CUDA_GRID_LOOP(i, n4) {
    float4 u = a[i], v = b[i], o;
    o.x = f(u.x, v.x);
    o.y = f(u.y, v.y);
    o.z = f(u.z, v.z);
    o.w = f(u.w, v.w);
    y[i] = o;
  }
}

template <class F>
void map1(const CudaContext& c, const float* x, float* y, int64_t n, F f) {
  if (n <= 0) return;
  if (n % 4 == 0 && aligned16(x) && aligned16(y)) {
    int64_t n4 = n / 4;
    TRAINER_LAUNCH(map1_vec_kernel<F>, grid_for(n4, c), kBlock, c.stream(), reinterpret_cast<const float4*>(x),
                   reinterpret_cast<float4*>(y), n4, f);
  } else {
    TRAINER_LAUNCH(map1_kernel<F>, grid_for(n, c), kBlock, c.stream(), x, y, n, f);
  }
}

template <class F>
void map2(const CudaContext& c, const float* a, const float* b, float* y, int64_t n, F f) {
  if (n <= 0) return;
  if (n % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(y)) {
    int64_t n4 = n / 4;
    TRAINER_LAUNCH(map2_vec_kernel<F>, grid_for(n4, c), kBlock, c.stream(), reinterpret_cast<const float4*>(a),
                   reinterpret_cast<const float4*>(b), reinterpret_cast<float4*>(y), n4, f);
  } else {
    TRAINER_LAUNCH(map2_kernel<F>, grid_for(n, c), kBlock, c.stream(), a, b, y, n, f);
  }
}

}  // namespace trainer::cuda
