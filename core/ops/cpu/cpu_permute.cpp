// CPU permute: Keras's Permute, each output element copied from its input element (permute_math.h), 2- or 4-byte floats.
#include <cstdint>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/permute.h"

namespace trainer {
namespace {

class CpuPermute final : public PermuteKernel {
 public:
  CpuPermute(OpContext& ctx, const PermuteParams& p) : PermuteKernel(ctx, p) {}

 private:
  void copy_impl(const permute_math::Index& ix, const Tensor& in, Tensor& out) override {
    if (dtype_size(in.dtype()) == 4) copy<uint32_t>(ix, in, out);
    else copy<uint16_t>(ix, in, out);
  }
  template <class Bits>
  static void copy(const permute_math::Index& ix, const Tensor& in, Tensor& out) {
    const Bits* src = in.as<Bits>();
    Bits* dst = out.as<Bits>();
    const int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t e = 0; e < n; ++e) dst[e] = src[ix.source(e)];
  }
};

static RegisterKernel<PermuteKernel, CpuPermute> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
