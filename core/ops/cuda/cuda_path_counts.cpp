// Process-wide counters of the CUDA fast paths' calls (cuda_path_counts.h).
#include "core/ops/cuda/cuda_path_counts.h"

#include <atomic>

namespace trainer::cuda {
namespace {

std::atomic<int64_t> g_calls[int(PathCount::kCount)];

}  // namespace

void count_path(PathCount p) { g_calls[int(p)].fetch_add(1, std::memory_order_relaxed); }

int64_t path_calls(PathCount p) { return g_calls[int(p)].load(std::memory_order_relaxed); }

}  // namespace trainer::cuda
