// CPU dense: y = x·w + b over the last axis and its gradients through oneDNN's row-major sgemm.
#include <cstring>
#include <vector>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/dense.h"

namespace trainer {
namespace {

void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  if (dnnl::sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) != dnnl::status::success)
    cpu::fail("dense: sgemm failed for {}x{}x{}", m, n, k);
}

class CpuDense final : public DenseKernel {
 public:
  CpuDense(OpContext&, const DenseParams& p) : p_(p) {
    if (p.units <= 0) cpu::fail("dense: units must be positive, got {}", p.units);
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const std::pair<int64_t, int64_t> nk = check(x, w);  // no structured binding: clang < 16 can't capture it in OpenMP
    const int64_t n = nk.first, k = nk.second;
    int64_t u = p_.units;
    if (p_.bias) cpu::require_shape("dense", "b", b, {u});
    cpu::require_shape("dense", "y", y, out_shape(x));
    if (n == 0) return;
    float* yp = y.f32();
    if (p_.bias) {  // y = b, then y += x·w
      const float* bp = b.f32();
#pragma omp parallel for schedule(static) if (n * u > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) std::memcpy(yp + i * u, bp, size_t(u) * sizeof(float));
    }
    gemm('N', 'N', n, u, k, x.f32(), k, w.f32(), u, p_.bias ? 1.0f : 0.0f, yp, u);
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) override {
    auto [n, k] = check(x, w);
    int64_t u = p_.units;
    cpu::require_shape("dense", "dy", dy, out_shape(x));
    cpu::require_shape("dense", "dw", dw, {k, u});
    if (p_.bias) cpu::require_shape("dense", "db", db, {u});
    if (dx.defined()) cpu::require_shape("dense", "dx", dx, x.shape());
    if (n == 0) {
      std::memset(dw.data(), 0, dw.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      return;
    }
    if (dx.defined()) gemm('N', 'T', n, k, u, dy.f32(), u, w.f32(), u, 0.0f, dx.f32(), k);
    gemm('T', 'N', k, u, n, x.f32(), k, dy.f32(), u, 0.0f, dw.f32(), u);
    if (p_.bias) {
      std::vector<double> acc(size_t(u), 0.0);
      const float* g = dy.f32();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < u; ++j) acc[j] += g[i * u + j];
      for (int64_t j = 0; j < u; ++j) db.f32()[j] = float(acc[j]);
    }
  }

 private:
  std::pair<int64_t, int64_t> check(const Tensor& x, const Tensor& w) const {
    cpu::require_f32("dense", "x", x);
    shape_checks::require_min_rank("dense", "x", x, 2);
    auto [rows, k] = shape_checks::rows_by_last(x);
    cpu::require_shape("dense", "w", w, {k, p_.units});
    return {rows, k};
  }
  // x [..., K] -> [..., units] (Keras applies Dense to the last axis).
  Shape out_shape(const Tensor& x) const {
    std::vector<int64_t> d = x.shape().dims();
    d.back() = p_.units;
    return Shape(std::move(d));
  }
  DenseParams p_;
};

static RegisterKernel<DenseKernel, CpuDense> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
