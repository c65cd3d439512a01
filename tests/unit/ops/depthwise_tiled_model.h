// The dw_tiled kernels' filter gradient on the host: blocks, row lanes and warp sums in the GPU kernels' order (depthwise_tiled_math.h), which the host and GPU tests compare bit for bit.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/ops/math/depthwise_tiled_math.h"

namespace trainer::test::dw_tiled {

namespace dt = depthwise_tiled;
using depthwise_math::DwShape;

// A loader of V consecutive floats of a host array (the device's 16-byte vector load).
template <int V>
struct HostLoadVec {
  const float* p;
  void vec(int32_t i, float (&out)[V]) const {
    for (int j = 0; j < V; ++j) out[j] = p[i + j];
  }
};

struct HostLoadF {
  const float* p;
  float operator()(int64_t i) const { return p[i]; }
};

// dw ([K·K][C], Keras's tap·C + c) and db ([C] when bias) as tiled_filter_kernel then
// tiled_filter_sum_kernel compute them: every block (chunk, 32 channels), its 8 row lanes, their
// sum in lane order; then per value the 32 warp lanes' chunk sums and the butterfly.
template <int K, int S>
void filter_model(const DwShape& s, const float* x, const float* dy, bool bias, std::vector<float>& dw,
                  std::vector<float>& db) {
  const int64_t rows = s.n * s.oh * s.ow, c_all = s.c;
  int64_t chunks = 0, per = 0;
  dt::filter_chunks(rows, chunks, per);
  const int slots = K * K + (bias ? 1 : 0);
  const int64_t per_chunk = int64_t(slots) * c_all, groups = (c_all + dt::kChanLanes - 1) / dt::kChanLanes;
  std::vector<float> partial(size_t(chunks * per_chunk));
  const HostLoadF lx{x}, ldy{dy};
  float sums[K * K + 1][dt::kRowLanes][dt::kChanLanes];  // the block's shared memory
  for (int64_t chunk = 0; chunk < chunks; ++chunk)
    for (int64_t g = 0; g < groups; ++g) {
      const int32_t row0 = int32_t(chunk * per), row1 = int32_t(std::min(rows, (chunk + 1) * per));
      for (int r = 0; r < dt::kRowLanes; ++r)
        for (int l = 0; l < dt::kChanLanes; ++l) {
          const int32_t c = int32_t(g * dt::kChanLanes + l);
          float acc[K * K + 1] = {};
          if (c < c_all) dt::filter_lane_sums<K, S>(s, lx, ldy, row0, row1, r, c, acc);
          for (int t = 0; t <= K * K; ++t) sums[t][r][l] = acc[t];
        }
      for (int slot = 0; slot < slots; ++slot)
        for (int l = 0; l < dt::kChanLanes; ++l) {
          const int64_t c = g * dt::kChanLanes + l;
          if (c < c_all) partial[size_t((chunk * slots + slot) * c_all + c)] = dt::lanes_sum(&sums[slot][0][l], dt::kChanLanes);
        }
    }
  dw.assign(size_t(K * K * c_all), 0.0f);
  db.assign(bias ? size_t(c_all) : 0, 0.0f);
  for (int64_t o = 0; o < per_chunk; ++o) {
    float lanes[dt::kWarp];
    for (int l = 0; l < dt::kWarp; ++l) lanes[l] = dt::lane_chunk_sum(partial.data(), chunks, per_chunk, o, l);
    const float v = dt::butterfly_sum(lanes);
    if (o < K * K * c_all) dw[size_t(o)] = v;
    else db[size_t(o - K * K * c_all)] = v;
  }
}

// filter_model for the shape's window (dt::takes_window(s) must hold).
inline void filter_model(const DwShape& s, const float* x, const float* dy, bool bias, std::vector<float>& dw,
                         std::vector<float>& db) {
  dt::with_window(s, [&](auto k, auto st) {
    filter_model<decltype(k)::value, decltype(st)::value>(s, x, dy, bias, dw, db);
  });
}

}  // namespace trainer::test::dw_tiled
