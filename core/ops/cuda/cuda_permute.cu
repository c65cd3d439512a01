// CUDA permute: Keras's Permute, a thread per output element copying its input element (permute_math.h, as the CPU), 2- or 4-byte floats.
#include <cstdint>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/permute.h"

namespace trainer {
namespace {

template <class Bits>
__global__ void permute_kernel(permute_math::Index ix, const Bits* __restrict__ src, Bits* __restrict__ dst, int64_t n) {
  CUDA_GRID_LOOP(e, n) dst[e] = src[ix.source(e)];
}

class CudaPermute final : public PermuteKernel {
 public:
  CudaPermute(OpContext& ctx, const PermuteParams& p) : PermuteKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void copy_impl(const permute_math::Index& ix, const Tensor& in, Tensor& out) override {
    const int64_t n = out.numel();
    if (n == 0) return;
    if (dtype_size(in.dtype()) == 4)
      TRAINER_LAUNCH(permute_kernel<uint32_t>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), ix,
                     static_cast<const uint32_t*>(in.data()), static_cast<uint32_t*>(out.data()), n);
    else
      TRAINER_LAUNCH(permute_kernel<uint16_t>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), ix,
                     static_cast<const uint16_t*>(in.data()), static_cast<uint16_t*>(out.data()), n);
  }

  CudaContext& c_;
};

static RegisterKernel<PermuteKernel, CudaPermute> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
