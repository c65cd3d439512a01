// The conv_1x1_gemm fast path on the GPU: bf16/f16 1x1 convolutions as the dense layer's GEMMs against float64 and against cuDNN's path, random shapes; a skip without a GPU.
#include "bf16_check.h"
#include "core/ops/conv2d.h"
#include "fastpath_fuzz.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_path_counts.h"
#endif

using namespace trainer;
using namespace trainer::test;
namespace bc = trainer::test::bf16_check;
namespace fz = trainer::test::fuzz;

#ifdef TRAINER_HAVE_CUDA
namespace {

// Uniform values in [-1, 1) kept at least 1/64 away from zero (so that f16 never meets its
// subnormals, where its rounding is not relative: bf16_check's bounds assume the normal range), of type dt.
ref::Vec away_from_zero(const Shape& s, std::mt19937_64& rng, DType dt) {
  ref::Vec v = to_vec(random_tensor(s, rng));
  for (double& e : v) e = bc::round_to(dt, std::copysign(std::max(std::fabs(e), 1.0 / 64), e));
  return v;
}

OpContext* low_context(const Device& dev, Precision p, bool gemm) {
  return gpu_context(dev, p, FastPaths::defaults().with(FastPath::Conv1x1Gemm, gemm));
}

}  // namespace
#endif

// Random 1x1 stride-1 convolutions (a fuzz budget of 40): batch 1 to 4, 1 to 24 rows and columns,
// 1 to 200 channels and filters (odd ones included), 'same' or 'valid', with and without bias and
// dx, bf16 and f16 activations; case 0 MobileNetV2's block_2 expansion at batch 64 (56x56x24 ->
// 144). Each path against float64 within bf16_check's bounds: y and dx one rounded operand (the
// weights) and a rounded output; dw and db exact operands, f32 sums — the GEMM path stores dw in
// f32, cuDNN's in the low type first (one rounding more). The GEMM path counted as taking the
// forward and the backward, cuDNN's never; the same bits on a second run.
TEST_CASE("conv2d (cuda): conv_1x1_gemm (1x1 convolutions as cuBLAS GEMMs) and cuDNN's path against float64, bf16 "
          "and f16, random shapes", "[fuzz]") {
  const Backend* gpu = gpu_backend();
  if (!gpu) return;
#ifdef TRAINER_HAVE_CUDA
  const Device dev = gpu->ctx().device();
  struct Path {
    const char* name;
    DType type;
    OpContext* ctx;
    bool gemm;
  };
  const Path paths[] = {{"bf16 conv_1x1_gemm", DType::BF16, low_context(dev, Precision::BF16, true), true},
                        {"bf16 cuDNN", DType::BF16, low_context(dev, Precision::BF16, false), false},
                        {"f16 conv_1x1_gemm", DType::F16, low_context(dev, Precision::FP16, true), true},
                        {"f16 cuDNN", DType::F16, low_context(dev, Precision::FP16, false), false}};
  const fz::Budget budget(40);
  int64_t ran = 0;
  for (int64_t c = 0; budget.more(c); ++c) {
    if (budget.skip(c)) continue;
    std::mt19937_64 rng = budget.rng(c, 0x11);
    int64_t n = uniform_int(rng, 1, 4), h = uniform_int(rng, 1, 24), w = uniform_int(rng, 1, 24),
            ch = uniform_int(rng, 1, 200), f = uniform_int(rng, 1, 200);
    Conv2dParams p;
    p.kh = p.kw = 1;
    p.padding = uniform_int(rng, 0, 1) ? Padding::Same : Padding::Valid;
    p.bias = uniform_int(rng, 0, 1) == 1;
    const bool want_dx = uniform_int(rng, 0, 4) > 0;
    if (c == 0) n = 64, h = w = 56, ch = 24, f = 144, p.bias = false;
    p.filters = f;
    INFO(budget.repro(c) << ": x " << n << "x" << h << "x" << w << "x" << ch << ", " << f << " filters, "
                         << padding_name(p.padding) << (p.bias ? ", bias" : "") << (want_dx ? "" : ", no dx"));
    const Shape xs{n, h, w, ch}, ys{n, h, w, f};
    const ref::ConvDims d{n, h, w, ch, h, w, f, 1, 1, 1, 1, 1, 1, 0, 0};
    const Tensor wt = from_vec(conv2d_weight_shape(ch, p), away_from_zero(conv2d_weight_shape(ch, p), rng, DType::F32));
    const Tensor b = p.bias ? random_tensor({f}, rng) : Tensor();
    for (const Path& path : paths) {
      INFO(path.name);
      const Backend be{path.name, path.ctx, kCudaTolerance};
      const Tensor x = bc::make(xs, path.type, away_from_zero(xs, rng, path.type));
      const Tensor dy = bc::make(ys, path.type, away_from_zero(ys, rng, path.type));
      auto k = make_kernel<Conv2dKernel>(*path.ctx, p);
      const int64_t before = cuda::path_calls(cuda::PathCount::Conv1x1Gemm);
      std::vector<Tensor> runs[2];
      for (auto& out : runs) {
        Tensor xd = be.upload(x), wd = be.upload(wt), bd = be.upload(b), dyd = be.upload(dy);
        Tensor y = be.upload(bc::nan_of(ys, path.type));
        Tensor dx = want_dx ? be.upload(bc::nan_of(xs, path.type)) : Tensor();
        Tensor dw = be.nan(wt.shape()), db = p.bias ? be.nan({f}) : Tensor();
        k->forward(xd, wd, bd, y);
        k->backward(xd, wd, dyd, dx, dw, db);
        out = {be.download(y), want_dx ? be.download(dx) : Tensor(), be.download(dw),
               p.bias ? be.download(db) : Tensor()};
      }
      CHECK(cuda::path_calls(cuda::PathCount::Conv1x1Gemm) - before == (path.gemm ? 4 : 0));
      for (size_t t = 0; t < runs[0].size(); ++t)
        if (runs[0][t].defined()) CHECK(bc::same_bits(runs[0][t], runs[1][t]));
      const ref::Vec xv = bc::values(x), wv = to_vec(wt), dyv = bc::values(dy), bv = p.bias ? to_vec(b) : ref::Vec();
      const auto absolute = [](ref::Vec v) {
        for (double& e : v) e = std::fabs(e);
        return v;
      };
      const ref::Vec bm = absolute(bv);
      ref::Vec rdx, rdw, rdb, mdx, mdw, mdb;
      ref::conv2d_backward(d, xv, wv, dyv, rdx, rdw, rdb);
      ref::conv2d_backward(d, absolute(xv), absolute(wv), absolute(dyv), mdx, mdw, mdb);
      const double u = bc::unit(path.type);
      // The weights rounded, y and dx stored low. cuDNN's y with a bias is rounded twice: its sum
      // stored low, then the bias added to it and stored again — the first rounding off by at most
      // u·Σ|x·w|, one more operand's worth (a reading found one or two channels with a small bias
      // exceeding the one-rounding bound on other seeds); the GEMM path adds the bias into the sum.
      const bc::Rounding r_dx{1, true, u}, r_y{p.bias && !path.gemm ? 2 : 1, true, u}, r_dw{0, !path.gemm, u},
          r_db{0, false, u};
      bc::check_bound("y", r_y, runs[0][0], ref::conv2d_forward(d, xv, wv, p.bias ? &bv : nullptr),
                      ref::conv2d_forward(d, absolute(xv), absolute(wv), p.bias ? &bm : nullptr), ch);
      if (want_dx) bc::check_bound("dx", r_dx, runs[0][1], rdx, mdx, f);
      bc::check_bound("dw", r_dw, runs[0][2], rdw, mdw, n * h * w);
      if (p.bias) bc::check_bound("db", r_db, runs[0][3], rdb, mdb, n * h * w);
    }
    ++ran;
  }
  CHECK(ran > 0);
#endif
}
