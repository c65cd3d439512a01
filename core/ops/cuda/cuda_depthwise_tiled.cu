// The dw_tiled fast path's CUDA kernels: depthwise conv2d forward, backward data and filter gradient for 3x3/5x5 windows at stride 1/2 (arithmetic in depthwise_tiled_math.h).
#include "core/ops/cuda/cuda_depthwise_tiled.h"

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/cuda/cuda_path_counts.h"
#include "core/ops/math/depthwise_tiled_math.h"

// Why: the general kernels (cuda_depthwise_conv2d.cu) took MobileNetV2's depthwise layers at ~5x
// what their bytes need on an H200 (block_1: 0.42 ms forward, 1.93 ms backward at b64,
// docs/gpu-runs/2026-11-27-h200.md): a 4-byte load at a time behind run-time loops, four integer
// divisions per output channel, and a filter gradient whose threads each walk ~800 rows alone.
// Here the window and stride are template arguments (the taps unrolled, their loads independent),
// a thread moves a 16-byte vector of channels, and the filter gradient reads each row of dy once
// for all taps, in blocks of 8 x 32 threads. Forward and backward data give the general kernels'
// bits (tests/unit/ops/depthwise_tiled_test.cpp compares them on the GPU); the filter gradient
// sums in another fixed order, reproduced bit for bit by its host model
// (kernel_math_dw_tiled_test.cpp).

namespace trainer::cuda {
namespace {

namespace dt = depthwise_tiled;
using depthwise_math::DwShape;

constexpr int kFilterBlock = dt::kRowLanes * dt::kChanLanes;
static_assert(kFilterBlock == kBlock, "the filter kernel's block is the element-wise one");

// A loader of kVec<T> consecutive channels (one 16-byte access), widened to float.
template <class T>
struct LoadVec {
  const T* p;
  __device__ __forceinline__ void vec(int32_t i, float (&out)[kVec<T>]) const { load_pack(p + i, out); }
};

template <class T, int K, int S>
__global__ void __launch_bounds__(kBlock)
    tiled_forward_kernel(DwShape s, const T* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ b, T* __restrict__ y, int32_t vectors) {
  const LoadVec<T> lx{x};
  CUDA_GRID_LOOP_T(int32_t, i, vectors) {
    float acc[kVec<T>];
    dt::forward_vec_at<K, S, kVec<T>>(s, lx, w, b, i, acc);
    store_pack(y + i * kVec<T>, acc);
  }
}

template <class T, int K, int S>
__global__ void __launch_bounds__(kBlock)
    tiled_backward_data_kernel(DwShape s, const T* __restrict__ dy, const float* __restrict__ w, T* __restrict__ dx,
                               int32_t vectors) {
  const LoadVec<T> ldy{dy};
  CUDA_GRID_LOOP_T(int32_t, i, vectors) {
    float acc[kVec<T>];
    dt::backward_data_vec_at<K, S, kVec<T>>(s, ldy, w, i, acc);
    store_pack(dx + i * kVec<T>, acc);
  }
}

// Block b: chunk b / groups of the rows, channels [32·(b % groups), + 32). Thread t: channel lane
// t % 32, row lane t / 32. partial is [chunk][slot][C].
template <class T, int K, int S>
__global__ void __launch_bounds__(kFilterBlock)
    tiled_filter_kernel(DwShape s, const T* __restrict__ x, const T* __restrict__ dy, int32_t rows,
                        int32_t rows_per_chunk, int32_t groups, int slots, float* __restrict__ partial) {
  __shared__ float sums[K * K + 1][dt::kRowLanes][dt::kChanLanes];
  const int lane = int(threadIdx.x) % dt::kChanLanes, rlane = int(threadIdx.x) / dt::kChanLanes;
  const int32_t chunk = int32_t(blockIdx.x) / groups, c0 = (int32_t(blockIdx.x) % groups) * dt::kChanLanes;
  const int32_t row0 = chunk * rows_per_chunk, row1 = min(row0 + rows_per_chunk, rows);
  const int32_t c = c0 + lane;
  float acc[K * K + 1];
  if (c < int32_t(s.c)) {
    dt::filter_lane_sums<K, S>(s, Load<T>{x}, Load<T>{dy}, row0, row1, rlane, c, acc);
  } else {
#pragma unroll
    for (int t = 0; t <= K * K; ++t) acc[t] = 0.0f;
  }
#pragma unroll
  for (int t = 0; t <= K * K; ++t) sums[t][rlane][lane] = acc[t];
  __syncthreads();
  for (int e = int(threadIdx.x); e < slots * dt::kChanLanes; e += int(blockDim.x)) {
    const int slot = e / dt::kChanLanes, l = e % dt::kChanLanes;
    if (c0 + l >= int32_t(s.c)) continue;
    partial[(int64_t(chunk) * slots + slot) * s.c + c0 + l] = dt::lanes_sum(&sums[slot][0][l], dt::kChanLanes);
  }
}

// Warp o: value o of [slots][C] (slot < K·K: dw's tap·C + c, Keras's layout; slot K·K: db).
__global__ void __launch_bounds__(kBlock)
    tiled_filter_sum_kernel(const float* __restrict__ partial, int32_t chunks, int32_t per_chunk, int32_t taps_c,
                            float* __restrict__ dw, float* __restrict__ db) {
  const int32_t o = (int32_t(blockIdx.x) * int32_t(blockDim.x) + int32_t(threadIdx.x)) / dt::kWarp;
  const int lane = int(threadIdx.x) % dt::kWarp;
  if (o >= per_chunk) return;  // the whole warp: blockDim.x is a multiple of 32
  float v = dt::lane_chunk_sum(partial, chunks, per_chunk, o, lane);
#pragma unroll
  for (int off = dt::kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) {
    if (o < taps_c) dw[o] = v;
    else db[o - taps_c] = v;
  }
}

constexpr int64_t kIndexLimit = int64_t(1) << 30;

int64_t filter_slots(const DwShape& s, bool bias) { return int64_t(s.kh) * s.kw + (bias ? 1 : 0); }

// The vector kernels' common conditions: the window, whole vectors of channels, aligned tensors,
// 32-bit indices.
template <class T>
bool vectors_fit(const DwShape& s, const Tensor& a, const Tensor& b) {
  return dt::takes_window(s) && s.c % kVec<T> == 0 && aligned16(a.data()) && aligned16(b.data()) &&
         a.numel() < kIndexLimit && b.numel() < kIndexLimit;
}

}  // namespace

bool dw_tiled_takes(const DwShape& s, bool bias) {
  if (!dt::takes_window(s)) return false;
  const int64_t rows = s.n * s.oh * s.ow;
  int64_t chunks = 0, per = 0;
  dt::filter_chunks(rows, chunks, per);
  // (The sum kernel's threads, a warp per value of [slots][C], count in 32 bits too.)
  return s.n * s.ih * s.iw * s.c < kIndexLimit && rows * s.c < kIndexLimit &&
         chunks * filter_slots(s, bias) * s.c < kIndexLimit && filter_slots(s, bias) * s.c * dt::kWarp < kIndexLimit;
}

bool dw_tiled_forward(CudaContext& c, const DwShape& s, const Tensor& x, const float* w, const float* b, Tensor& y) {
  return dispatch_float("depthwise_conv2d", "x", x, [&](auto tag) {
    using T = decltype(tag);
    if (!vectors_fit<T>(s, x, y)) return false;
    const int32_t vectors = int32_t(y.numel() / kVec<T>);
    dt::with_window(s, [&](auto k, auto st) {
      TRAINER_LAUNCH((tiled_forward_kernel<T, decltype(k)::value, decltype(st)::value>), grid_for(vectors, c), kBlock,
                     c.stream(), s, ptr<const T>(x), w, b, ptr<T>(y), vectors);
    });
    count_path(PathCount::DwTiled);
    return true;
  });
}

bool dw_tiled_backward_data(CudaContext& c, const DwShape& s, const Tensor& dy, const float* w, Tensor& dx) {
  return dispatch_float("depthwise_conv2d", "dy", dy, [&](auto tag) {
    using T = decltype(tag);
    if (!vectors_fit<T>(s, dy, dx)) return false;
    const int32_t vectors = int32_t(dx.numel() / kVec<T>);
    dt::with_window(s, [&](auto k, auto st) {
      TRAINER_LAUNCH((tiled_backward_data_kernel<T, decltype(k)::value, decltype(st)::value>), grid_for(vectors, c),
                     kBlock, c.stream(), s, ptr<const T>(dy), w, ptr<T>(dx), vectors);
    });
    count_path(PathCount::DwTiled);
    return true;
  });
}

void dw_tiled_filter(CudaContext& c, const DwShape& s, const Tensor& x, const Tensor& dy, Scratch& partial, float* dw,
                     float* db) {
  const int64_t rows = s.n * s.oh * s.ow;
  int64_t chunks = 0, per = 0;
  dt::filter_chunks(rows, chunks, per);
  const int slots = int(filter_slots(s, db != nullptr));
  const int64_t groups = (s.c + dt::kChanLanes - 1) / dt::kChanLanes, per_chunk = int64_t(slots) * s.c;
  float* parts = partial.as<float>(c, size_t(chunks * per_chunk));  // grown once per shape
  dispatch_float("depthwise_conv2d", "x", x, [&](auto tag) {
    using T = decltype(tag);
    dt::with_window(s, [&](auto k, auto st) {
      TRAINER_LAUNCH((tiled_filter_kernel<T, decltype(k)::value, decltype(st)::value>), unsigned(chunks * groups),
                     kFilterBlock, c.stream(), s, ptr<const T>(x), ptr<const T>(dy), int32_t(rows), int32_t(per),
                     int32_t(groups), slots, parts);
    });
  });
  const int64_t warps_per_block = kBlock / dt::kWarp;
  TRAINER_LAUNCH(tiled_filter_sum_kernel, unsigned((per_chunk + warps_per_block - 1) / warps_per_block), kBlock,
                 c.stream(), parts, int32_t(chunks), int32_t(per_chunk), int32_t(s.kh * s.kw * s.c), dw, db);
  count_path(PathCount::DwTiled);
}

}  // namespace trainer::cuda
