// CUDA embedding: row gather with a device-side bad-id flag, and a deterministic gradient (stable radix sort by id, then per-id sums in position order).
//
// Forward: one thread per output element; an id that is not an integer in [0, V) writes zeros
// and lowers a device flag to its position (atomicMin on an integer: the result does not depend
// on the order), which the host reads after the kernel (one synchronisation per forward) to
// throw the same message as the CPU backend.
// Backward (as PyTorch's embedding_dense_backward): the positions are sorted by id with CUB's
// stable radix sort, so each id's positions stay in increasing order; then for every (segment
// head, column) one thread sums that id's dy rows in that order and writes its dw row. No float
// atomics: dw is bit-reproducible. Rows of ids that do not occur are zero. Backward trusts the
// ids its forward checked: an invalid id there is skipped rather than synchronising again.
#include <cub/cub.cuh>

#include <climits>
#include <cstdint>
#include <stdexcept>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/embedding.h"

namespace trainer {
namespace {

constexpr const char* kOp = "embedding";

__global__ void gather_kernel(const float* __restrict__ ids, const float* __restrict__ w, float* __restrict__ y,
                              int64_t P, int64_t D, int64_t V, unsigned long long* __restrict__ bad) {
  CUDA_GRID_LOOP(i, P * D) {
    const int64_t q = i / D, j = i % D;
    const int64_t src = embedding::gather_source(ids[q], V, D, j);
    if (src >= 0) {
      y[i] = w[src];
    } else {
      y[i] = 0.0f;
      if (j == 0) atomicMin(bad, (unsigned long long)q);
    }
  }
}

// A deferred check's note (embedding::note_bad_id's, on the device): the first bad position the
// gather flagged, unless the step's sums hold an earlier one.
__global__ void note_bad_id_kernel(const unsigned long long* __restrict__ flag, const float* __restrict__ ids,
                                   LossSums* __restrict__ s, int64_t V, int32_t cols) {
  const unsigned long long q = *flag;
  if (q == ULLONG_MAX || s->bad_id_at >= 0) return;
  s->bad_id_at = (long long)q;
  s->bad_id = ids[q];
  s->bad_id_vocab = V;
  s->bad_id_cols = cols;
}

// keys[q] = the id at position q (V for an invalid one: sorted last, then skipped); pos[q] = q.
__global__ void keys_kernel(const float* __restrict__ ids, uint32_t* __restrict__ keys, int32_t* __restrict__ pos,
                            int64_t P, int64_t V) {
  CUDA_GRID_LOOP(q, P) {
    keys[q] = embedding::sort_key(ids[q], V);
    pos[q] = int32_t(q);
  }
}

// For sorted index s that starts a run of equal keys, column j: dw[key, j] = Σ dy[pos[k], j]
// over the run, k increasing (embedding::segment_sum).
__global__ void segment_sum_kernel(const uint32_t* __restrict__ keys, const int32_t* __restrict__ pos,
                                   const float* __restrict__ dy, float* __restrict__ dw, int64_t P, int64_t D,
                                   int64_t V) {
  const cuda::Load<float> ldy{dy};
  CUDA_GRID_LOOP(i, P * D) {
    const int64_t s = i / D, j = i % D;
    float sum;
    if (embedding::segment_sum(keys, pos, ldy, P, D, V, s, j, sum)) dw[int64_t(keys[s]) * D + j] = sum;
  }
}

// Bits that hold every key in [0, V] (the radix sort skips the rest).
int key_bits(int64_t V) {
  int b = 1;
  while (b < 31 && (int64_t(1) << b) <= V) ++b;
  return b;
}

class CudaEmbedding final : public EmbeddingKernel {
 public:
  CudaEmbedding(OpContext& ctx, const EmbeddingParams& p) : EmbeddingKernel(ctx, p), c_(cuda_context(ctx)) {
    // Capability: the backward's radix sort takes 32-bit keys.
    if (p.input_dim >= INT_MAX) cuda::fail(kOp, ": input_dim ", p.input_dim, " exceeds 32-bit ids");
  }

 private:
  // Check::Now synchronises the stream to read the gather's flag; Deferred (a recorded step) notes
  // the flagged position in the step's sums by a kernel, no host read; Trusted reads nothing.
  void forward_impl(const Tensor& ids, const Tensor& w, Tensor& y, Check how, LossSums* sums) override {
    const int64_t P = ids.numel(), D = p_.output_dim;
    if (P == 0) return;
    unsigned long long* flag = flag_.as<unsigned long long>(c_, 1);
    CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), c_.stream()));  // ULLONG_MAX
    TRAINER_LAUNCH(gather_kernel, cuda::grid_for(P * D, c_), cuda::kBlock, c_.stream(), ids.f32(), w.f32(), y.f32(), P,
                   D, p_.input_dim, flag);
    if (how == Check::Trusted) return;
    if (how == Check::Deferred) {
      const int32_t cols = ids.shape().rank() >= 2 ? int32_t(ids.shape().dims().back()) : 0;
      TRAINER_LAUNCH(note_bad_id_kernel, 1u, 1u, c_.stream(), flag, ids.f32(), sums, p_.input_dim, cols);
      return;
    }
    unsigned long long bad = 0;
    c_.copy_to_host(&bad, flag, sizeof bad);  // synchronises
    if (bad != ULLONG_MAX) {
      float v = 0.0f;
      c_.copy_to_host(&v, ids.f32() + bad, sizeof v);
      throw std::runtime_error(embedding::bad_id_message(v, int64_t(bad), ids.shape(), p_.input_dim));
    }
  }

  void backward_impl(const Tensor& ids, const Tensor& dy, Tensor& dw) override {
    c_.fill_zero(dw.data(), dw.bytes());
    const int64_t P = ids.numel(), D = p_.output_dim, V = p_.input_dim;
    if (P == 0) return;
    if (P > INT_MAX) cuda::fail(kOp, ": ", P, " ids exceed the 32-bit sort");  // capability
    const int n = int(P);
    // keys, sorted keys, positions, sorted positions, then CUB's temporary storage.
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                               static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                               static_cast<int32_t*>(nullptr), n, 0, key_bits(V), c_.stream()));
    const size_t arr = (size_t(P) * sizeof(int32_t) + 255) & ~size_t(255);
    char* base = static_cast<char*>(sort_.get(c_, 4 * arr + temp_bytes));
    uint32_t* keys = reinterpret_cast<uint32_t*>(base);
    uint32_t* keys_sorted = reinterpret_cast<uint32_t*>(base + arr);
    int32_t* pos = reinterpret_cast<int32_t*>(base + 2 * arr);
    int32_t* pos_sorted = reinterpret_cast<int32_t*>(base + 3 * arr);
    TRAINER_LAUNCH(keys_kernel, cuda::grid_for(P, c_), cuda::kBlock, c_.stream(), ids.f32(), keys, pos, P, V);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 4 * arr, temp_bytes, keys, keys_sorted, pos, pos_sorted, n, 0,
                                               key_bits(V), c_.stream()));
    TRAINER_LAUNCH(segment_sum_kernel, cuda::grid_for(P * D, c_), cuda::kBlock, c_.stream(), keys_sorted, pos_sorted,
                   dy.f32(), dw.f32(), P, D, V);
  }

  CudaContext& c_;
  Scratch flag_;  // forward's first bad position
  Scratch sort_;  // backward's keys and positions (unsorted, sorted) and CUB's temporary storage
};

static RegisterKernel<EmbeddingKernel, CudaEmbedding> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
