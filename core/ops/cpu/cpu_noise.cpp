// CPU noise: Keras's GaussianNoise and GaussianDropout, each element's normal value from the step's seed (gaussian_noise.h), drawn again in backward.
#include <cstring>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/gaussian_noise.h"
#include "core/ops/noise.h"

namespace trainer {
namespace {

class CpuNoise final : public NoiseKernel {
 public:
  CpuNoise(OpContext& ctx, const NoiseParams& p) : NoiseKernel(ctx, p) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y, DropoutSeed s) override { run(x.f32(), y.f32(), x.numel(), s, false); }
  void backward_impl(const Tensor& dy, Tensor& dx, DropoutSeed s) override {
    if (!p_.multiplicative) {
      if (dx.data() != dy.data()) std::memcpy(dx.data(), dy.data(), dy.bytes());
      return;
    }
    run(dy.f32(), dx.f32(), dy.numel(), s, true);
  }
  // o[i] = v[i] under element i's noise (forward), or v[i]·its factor (the gradient).
  void run(const float* v, float* o, int64_t n, DropoutSeed s, bool gradient) const {
    const uint64_t seed = s.resolve();
    const float sd = p_.stddev;
    const bool mult = p_.multiplicative;
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain / 16)
    for (int64_t g = 0; g < (n + 3) / 4; ++g) {
      const Philox4 r = dropout_words(uint64_t(g), seed);
      for (int64_t j = 0; j < 4 && g * 4 + j < n; ++j) {
        const int64_t i = g * 4 + j;
        const float z = gaussian_noise(r, int(j));
        o[i] = gradient ? v[i] * noise_factor(z, sd) : noise_apply(mult, v[i], z, sd);
      }
    }
  }
};

static RegisterKernel<NoiseKernel, CpuNoise> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
