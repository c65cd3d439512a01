// CUDA multiply: y = a·b with b broadcast over a's positions, and its gradients (db: thread per (n, c), the positions summed in order in double, as the CPU), any float type.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/multiply.h"

namespace trainer {
namespace {

// out[i] = u[i]·g[n, c] for i = (n·P + p)·C + c: the forward (u = a) and da (u = dy). out may be u.
template <class T>
__global__ void broadcast_mul_kernel(const T* u, const T* g, T* out, int64_t N, int64_t P, int64_t C) {
  CUDA_GRID_LOOP(i, N * P * C) {
    const int64_t c = i % C, n = i / (P * C);
    out[i] = cuda::from_f32<T>(cuda::to_f32(u[i]) * cuda::to_f32(g[n * C + c]));
  }
}

// db[n, c] = Σ_p dy·a over p in order, in double (each product exact): adjacent threads read
// adjacent channels.
template <class T>
__global__ void broadcast_grad_kernel(const T* a, const T* dy, T* db, int64_t N, int64_t P, int64_t C) {
  CUDA_GRID_LOOP(idx, N * C) {
    const int64_t n = idx / C, c = idx - n * C;
    double s = 0;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t i = (n * P + p) * C + c;
      s += double(cuda::to_f32(dy[i])) * double(cuda::to_f32(a[i]));
    }
    db[idx] = cuda::from_f32<T>(float(s));
  }
}

class CudaMultiply final : public MultiplyKernel {
 public:
  CudaMultiply(OpContext& ctx, const MultiplyParams& p) : MultiplyKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Tensor& a, const Tensor& b, Tensor& y) override {
    const int64_t N = a.dim(0), P = a.dim(1), C = a.dim(2);
    if (N * P * C == 0) return;
    cuda::dispatch_float(kName, "a", a, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(broadcast_mul_kernel<T>, cuda::grid_for(N * P * C, c_), cuda::kBlock, c_.stream(),
                     cuda::ptr<const T>(a), cuda::ptr<const T>(b), cuda::ptr<T>(y), N, P, C);
    });
  }

  void backward_impl(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) override {
    const int64_t N = a.dim(0), P = a.dim(1), C = a.dim(2);
    cuda::dispatch_float(kName, "a", a, [&](auto tag) {
      using T = decltype(tag);
      if (db.defined() && N * C > 0)  // before da, which may be dy's buffer
        TRAINER_LAUNCH(broadcast_grad_kernel<T>, cuda::grid_for(N * C, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(a), cuda::ptr<const T>(dy), cuda::ptr<T>(db), N, P, C);
      if (da.defined() && N * P * C > 0)
        TRAINER_LAUNCH(broadcast_mul_kernel<T>, cuda::grid_for(N * P * C, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(dy), cuda::ptr<const T>(b), cuda::ptr<T>(da), N, P, C);
    });
  }

  CudaContext& c_;
};

static RegisterKernel<MultiplyKernel, CudaMultiply> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
