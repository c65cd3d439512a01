// The losses' last pass on CUDA: per-sample losses and statuses summed in a fixed order into LossSums (written, or added to in a recorded step).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/context.h"
#include "core/ops/step_scalars.h"

namespace trainer::cuda {

// A loss's per-call scratch: per-sample losses and statuses, then a LossSums (doubles first:
// 8-byte aligned), from `s` (grown once for the largest batch).
struct LossScratch {
  double* losses;
  int32_t* status;
  LossSums* sums;
};
inline LossScratch loss_scratch(Scratch& s, OpContext& c, int64_t N) {
  const size_t loss_bytes = size_t(N) * sizeof(double), status_bytes = size_t(N) * sizeof(int32_t);
  const size_t sums_at = (loss_bytes + status_bytes + 15) & ~size_t(15);
  char* buf = static_cast<char*>(s.get(c, sums_at + sizeof(LossSums)));
  return {reinterpret_cast<double*>(buf), reinterpret_cast<int32_t*>(buf + loss_bytes),
          reinterpret_cast<LossSums*>(buf + sums_at)};
}

// One block: status[i] 1 hit, 0 miss, -1 bad label, -2 ignored label (not counted). `sums` gets
// loss_sum, correct, count (N less the ignored) and
// the first bad sample with its label (labels may be null: label 0), each summed in a fixed order
// (bit-reproducible for a given N). reset: written (the ordinary path, read back by the host);
// else added to (a recorded step's running sums; a bad sample noted once).
void launch_loss_sums(cudaStream_t stream, const double* losses, const int32_t* status, const int32_t* labels, int64_t N,
                      LossSums* sums, bool reset);

}  // namespace trainer::cuda
