// CPU prelu: Keras's PReLU row by row (alpha's offset found once per innermost run), alpha's gradient as per-block double sums added in block order: the same bits at any thread count.
#include <algorithm>
#include <vector>

#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/prelu.h"

namespace trainer {
namespace {

// x's elements as rows of the innermost merged axis: alpha's offset of row o (per_row elements)
// and the step along the row (0 where that axis is shared, 1 where alpha follows it).
struct Rows {
  int64_t len, count, step;
  Rows(const prelu_math::Index& ix, int64_t numel)
      : len(ix.rank ? ix.dims[ix.rank - 1] : 1), count(len ? numel / len : 0), step(ix.rank && !ix.shared[ix.rank - 1]) {}
  int64_t alpha_base(const prelu_math::Index& ix, int64_t o) const {
    return ix.sample ? ix.alpha_of((o * len) % ix.sample) : 0;
  }
};

class CpuPRelu final : public PReluKernel {
 public:
  CpuPRelu(OpContext& ctx, const PReluParams& p) : PReluKernel(ctx, p) {}

 private:
  void forward_impl(const prelu_math::Index& ix, const Tensor& x, const Tensor& alpha, Tensor& y) override {
    const Rows rows(ix, x.numel());
    const float* a = alpha.f32();
    cpu::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x.as<T>();
      T* yp = y.as<T>();  // may be x: each element is read before it is written
#pragma omp parallel for schedule(static) if (x.numel() > cpu::kParallelGrain)
      for (int64_t o = 0; o < rows.count; ++o) {
        const float* ar = a + rows.alpha_base(ix, o);
        const int64_t b = o * rows.len;
        for (int64_t i = 0; i < rows.len; ++i)
          yp[b + i] = cpu::from_f32<T>(prelu_math::forward(cpu::to_f32(xp[b + i]), ar[i * rows.step]));
      }
    });
  }

  void backward_impl(const prelu_math::Index& ix, const Tensor& x, const Tensor& alpha, const Tensor& dy, Tensor& dx,
                     Tensor& dalpha) override {
    const Rows rows(ix, x.numel());
    const float* a = alpha.f32();
    cpu::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x.as<T>();
      const T* gp = dy.as<T>();
      if (dalpha.defined()) alpha_grad(ix, rows, xp, gp, x.dim(0), dalpha.f32());  // before dx, which may be dy
      if (!dx.defined()) return;
      T* dp = dx.as<T>();
#pragma omp parallel for schedule(static) if (x.numel() > cpu::kParallelGrain)
      for (int64_t o = 0; o < rows.count; ++o) {
        const float* ar = a + rows.alpha_base(ix, o);
        const int64_t b = o * rows.len;
        for (int64_t i = 0; i < rows.len; ++i)
          dp[b + i] = cpu::from_f32<T>(prelu_math::input_grad(cpu::to_f32(xp[b + i]), ar[i * rows.step],
                                                               cpu::to_f32(gp[b + i])));
      }
    });
  }

  // dalpha: the samples cut into blocks of a size set by the shape alone (at least 64 Ki elements,
  // at most 64 blocks); each block sums its terms per alpha in memory order (for one alpha, the
  // reduction's order) in double, then the blocks' sums are added in block order and rounded once.
  template <class T>
  void alpha_grad(const prelu_math::Index& ix, const Rows& rows, const T* xp, const T* gp, int64_t N, float* da) {
    const int64_t A = ix.alphas;
    if (A == 0) return;
    const int64_t per_block = std::max<int64_t>({1, ix.sample ? (int64_t(1) << 16) / ix.sample : N, (N + 63) / 64});
    const int64_t blocks = N && ix.sample ? (N + per_block - 1) / per_block : 0;
    part_.assign(size_t(std::max<int64_t>(blocks, 1) * A), 0.0);
    const int64_t rows_per_sample = rows.len ? ix.sample / rows.len : 0;
#pragma omp parallel for schedule(static) if (blocks > 1 && N * ix.sample > cpu::kParallelGrain)
    for (int64_t b = 0; b < blocks; ++b) {
      double* acc = part_.data() + b * A;
      const int64_t o_end = std::min(N, (b + 1) * per_block) * rows_per_sample;
      for (int64_t o = b * per_block * rows_per_sample; o < o_end; ++o) {
        double* ar = acc + rows.alpha_base(ix, o);
        const int64_t e = o * rows.len;
        for (int64_t i = 0; i < rows.len; ++i)
          ar[i * rows.step] += prelu_math::alpha_term(cpu::to_f32(xp[e + i]), cpu::to_f32(gp[e + i]));
      }
    }
    for (int64_t c = 0; c < A; ++c) {
      double s = 0.0;
      for (int64_t b = 0; b < blocks; ++b) s += part_[size_t(b * A + c)];
      da[c] = float(s);
    }
  }

  std::vector<double> part_;  // the blocks' sums (grown on the first call of a shape)
};

static RegisterKernel<PReluKernel, CpuPRelu> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
