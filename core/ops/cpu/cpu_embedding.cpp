// CPU embedding: row gather by float-held ids (checked first), and the gradient as a per-row sum in position order.
#include <omp.h>

#include <cstring>
#include <stdexcept>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/embedding.h"

namespace trainer {
namespace {

class CpuEmbedding final : public EmbeddingKernel {
 public:
  CpuEmbedding(OpContext& ctx, const EmbeddingParams& p) : EmbeddingKernel(ctx, p) {}

 private:
  // Checked now: a bad id throws before anything is written. Otherwise (a deferred check, as a
  // recorded step's on a GPU) a bad id's row is zeros and the first is noted in the step's sums.
  void forward_impl(const Tensor& ids, const Tensor& w, Tensor& y, Check how, LossSums* sums) override {
    const int64_t P = ids.numel(), D = p_.output_dim, V = p_.input_dim;
    if (P == 0) return;
    if (how == Check::Now) check_ids(ids);
    const bool checked = how == Check::Now;  // every id valid: no test per row
    const float* ip = ids.f32();
    const float* wp = w.f32();
    float* yp = y.f32();
#pragma omp parallel for schedule(static) if (P * D > cpu::kParallelGrain)
    for (int64_t q = 0; q < P; ++q) {
      if (checked || embedding::valid_id(ip[q], V)) std::memcpy(yp + q * D, wp + int64_t(ip[q]) * D, size_t(D) * sizeof(float));
      else std::memset(yp + q * D, 0, size_t(D) * sizeof(float));
    }
    if (how != Check::Deferred) return;
    for (int64_t q = 0; q < P; ++q)
      if (!embedding::valid_id(ip[q], V)) return embedding::note_bad_id(*sums, q, ip[q], ids.shape(), V);
  }

  // Each thread owns a contiguous range of rows of dw and adds, in position order, the dy rows
  // of the ids in its range: every row's sum has the same order whatever the thread count.
  void backward_impl(const Tensor& ids, const Tensor& dy, Tensor& dw) override {
    std::memset(dw.data(), 0, dw.bytes());
    const int64_t P = ids.numel(), D = p_.output_dim, V = p_.input_dim;
    if (P == 0) return;
    check_ids(ids);
    const float* ip = ids.f32();
    const float* gp = dy.f32();
    float* wp = dw.f32();
#pragma omp parallel if (P * D > cpu::kParallelGrain)
    {
      const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t v0 = V * tid / nt, v1 = V * (tid + 1) / nt;
      for (int64_t q = 0; q < P; ++q) {
        const int64_t v = int64_t(ip[q]);
        if (v < v0 || v >= v1) continue;
        float* row = wp + v * D;
        const float* g = gp + q * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) row[j] += g[j];
      }
    }
  }

  // Throws for the first id that is not an integer in [0, V).
  void check_ids(const Tensor& ids) const {
    const float* ip = ids.f32();
    for (int64_t q = 0; q < ids.numel(); ++q)
      if (!embedding::valid_id(ip[q], p_.input_dim))
        throw std::runtime_error(embedding::bad_id_message(ip[q], q, ids.shape(), p_.input_dim));
  }
};

static RegisterKernel<EmbeddingKernel, CpuEmbedding> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
