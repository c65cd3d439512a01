// CUDA rescale: Keras's Rescaling, x·scale + offset per element (one value, or one per channel, uploaded once), any float type.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/rescale.h"

namespace trainer {
namespace {

// out = in·scale + offset (forward), or in·scale (the gradient); may be in place.
template <class T>
__global__ void rescale_kernel(const T* in, T* out, const float* scale, const float* offset, int64_t n, int64_t C,
                               bool forward) {
  CUDA_GRID_LOOP(i, n) {
    const int64_t c = C == 1 ? 0 : i % C;
    const float v = cuda::to_f32(in[i]);
    out[i] = cuda::from_f32<T>(forward ? rescale_math::forward(v, scale[c], offset[c]) : __fmul_rn(v, scale[c]));
  }
}

class CudaRescale final : public RescaleKernel {
 public:
  CudaRescale(OpContext& ctx, const RescaleParams& p) : RescaleKernel(ctx, p), c_(cuda_context(ctx)) {
    // scale and offset on the device, once (the step allocates nothing)
    values_ = c_.empty({2 * channels()});
    std::vector<float> both(p.scale);
    both.insert(both.end(), p.offset.begin(), p.offset.end());
    c_.copy_from_host(values_.data(), both.data(), both.size() * sizeof(float));
  }

 private:
  void forward_impl(const Tensor& x, Tensor& y) override { run(x, y, true); }
  void backward_impl(const Tensor& dy, Tensor& dx) override { run(dy, dx, false); }

  void run(const Tensor& in, Tensor& out, bool forward) {
    const int64_t n = in.numel(), C = channels();
    if (n == 0) return;
    cuda::dispatch_float(kName, "x", in, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(rescale_kernel<T>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), cuda::ptr<const T>(in),
                     cuda::ptr<T>(out), values_.f32(), values_.f32() + C, n, C, forward);
    });
  }

  CudaContext& c_;
  Tensor values_;  // [scale..., offset...]
};

static RegisterKernel<RescaleKernel, CudaRescale> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
