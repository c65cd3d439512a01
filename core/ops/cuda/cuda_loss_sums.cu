// The fixed-order sum of the losses' per-sample results into LossSums.
#include <climits>

#include "core/ops/cuda/cuda_loss_sums.h"
#include "core/ops/cuda/cuda_util.cuh"

namespace trainer::cuda {
namespace {

constexpr unsigned kBlockThreads = 256;

__global__ void loss_sums_kernel(const double* losses, const int32_t* status, const int32_t* labels, int64_t N,
                                 LossSums* sums, bool reset) {
  double s = 0.0;
  long long hits = 0, skipped = 0, bad = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    s += losses[i];
    const int32_t st = status[i];
    if (st > 0) ++hits;
    if (st == -2) ++skipped;
    if (st == -1 && i < bad) bad = i;
  }
  s = block_sum(s);
  hits = block_sum(hits);
  skipped = block_sum(skipped);
  bad = block_min(bad);
  if (threadIdx.x != 0) return;
  if (reset) *sums = LossSums{};
  sums->loss_sum += s;
  sums->correct += hits;
  sums->count += N - skipped;
  if (bad != LLONG_MAX && sums->bad_sample < 0) {
    sums->bad_sample = bad;
    sums->bad_label = labels ? labels[bad] : 0;
  }
}

}  // namespace

void launch_loss_sums(cudaStream_t stream, const double* losses, const int32_t* status, const int32_t* labels, int64_t N,
                      LossSums* sums, bool reset) {
  TRAINER_LAUNCH(loss_sums_kernel, 1u, kBlockThreads, stream, losses, status, labels, N, sums, reset);
}

}  // namespace trainer::cuda
