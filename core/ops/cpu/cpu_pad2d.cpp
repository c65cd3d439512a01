// CPU pad2d: zero padding of NHWC rows (forward) and cropping of the padded gradient (backward), row copies under OpenMP.
#include <cstring>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/pad2d.h"

// Padding only moves elements, so f32 and bf16 (mixed precision) are the same byte copies with the
// element size as a parameter; zero bits are 0.0 in both.

namespace trainer {
namespace {

class CpuPad2d final : public Pad2dKernel {
 public:
  CpuPad2d(OpContext& ctx, const Pad2dParams& p) : Pad2dKernel(ctx, p) {}

 private:
  // Every output row (b, oy) is written whole: zeros, the input row or nothing, zeros.
  void forward_impl(const Tensor& x, Tensor& y) override {
    cpu::refuse_f16(kName, "x", x);
    const DType t = x.dtype();
    if (y.numel() == 0) return;
    const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
    const int64_t oh = y.dim(1), ow = y.dim(2);
    const size_t es = dtype_size(t);  // row lengths below are in bytes
    const size_t row = size_t(ow * c) * es, left = size_t(p_.left * c) * es, inner = size_t(w * c) * es;
    const size_t right = size_t(p_.right * c) * es;
    const char* xp = static_cast<const char*>(x.data());
    char* yp = static_cast<char*>(y.data());
#pragma omp parallel for schedule(static) if (y.numel() > cpu::kParallelGrain)
    for (int64_t r = 0; r < n * oh; ++r) {
      const int64_t b = r / oh, iy = r % oh - p_.top;
      char* dst = yp + size_t(r) * row;
      if (iy < 0 || iy >= h) {
        std::memset(dst, 0, row);
        continue;
      }
      std::memset(dst, 0, left);
      std::memcpy(dst + left, xp + size_t(b * h + iy) * inner, inner);
      std::memset(dst + left + inner, 0, right);
    }
  }

  void backward_impl(const Tensor& dy, Tensor& dx) override {
    cpu::refuse_f16(kName, "dx", dx);
    const DType t = dx.dtype();
    if (dx.numel() == 0) return;
    const int64_t n = dx.dim(0), h = dx.dim(1), w = dx.dim(2), c = dx.dim(3);
    const int64_t oh = dy.dim(1), ow = dy.dim(2);
    const size_t es = dtype_size(t);
    const char* src = static_cast<const char*>(dy.data());
    char* dst = static_cast<char*>(dx.data());
#pragma omp parallel for schedule(static) if (dx.numel() > cpu::kParallelGrain)
    for (int64_t r = 0; r < n * h; ++r) {
      const int64_t b = r / h, iy = r % h;
      std::memcpy(dst + size_t(r * w * c) * es, src + size_t(((b * oh + iy + p_.top) * ow + p_.left) * c) * es,
                  size_t(w * c) * es);
    }
  }
};

static RegisterKernel<Pad2dKernel, CpuPad2d> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
