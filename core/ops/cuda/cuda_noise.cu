// CUDA noise: Keras's GaussianNoise and GaussianDropout, a thread per group of four elements drawing the CPU's normal values (gaussian_noise.h), drawn again in backward.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/math/gaussian_noise.h"
#include "core/ops/noise.h"

namespace trainer {
namespace {

// o[i] = v[i] under element i's noise, or (gradient) v[i]·its factor. `step` (device memory, may
// be null): the seed is node_seed(step's seed, seed0), read here.
__global__ void noise_kernel(const float* v, float* o, int64_t n, uint64_t seed0, const StepScalars* step, float sd,
                             bool mult, bool gradient) {
  const uint64_t seed = DropoutSeed{seed0, step}.resolve();
  CUDA_GRID_LOOP(g, (n + 3) / 4) {
    const Philox4 r = dropout_words(uint64_t(g), seed);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = g * 4 + j;
      if (i < n) {
        const float z = gaussian_noise(r, j);
        o[i] = gradient ? v[i] * noise_factor(z, sd) : noise_apply(mult, v[i], z, sd);
      }
    }
  }
}

class CudaNoise final : public NoiseKernel {
 public:
  CudaNoise(OpContext& ctx, const NoiseParams& p) : NoiseKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y, DropoutSeed s) override { run(x.f32(), y.f32(), x.numel(), s, false); }
  void backward_impl(const Tensor& dy, Tensor& dx, DropoutSeed s) override {
    if (!p_.multiplicative) {
      if (dx.data() != dy.data()) c_.copy(dx.data(), dy.data(), dy.bytes());
      return;
    }
    run(dy.f32(), dx.f32(), dy.numel(), s, true);
  }
  void run(const float* v, float* o, int64_t n, DropoutSeed s, bool gradient) {
    if (n == 0) return;
    TRAINER_LAUNCH(noise_kernel, cuda::grid_for((n + 3) / 4, c_), cuda::kBlock, c_.stream(), v, o, n, s.value, s.step,
                   p_.stddev, p_.multiplicative, gradient);
  }

  CudaContext& c_;
};

static RegisterKernel<NoiseKernel, CudaNoise> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
