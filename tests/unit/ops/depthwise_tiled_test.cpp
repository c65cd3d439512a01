// The dw_tiled fast path on the GPU: its depthwise kernels against the general ones (y and dx the same bits) and against their host model (dw and db bit for bit), f32, bf16 and f16, random MobileNet-style shapes; a skip without a GPU.
#include <cstring>

#include "backends.h"
#include "bf16_check.h"
#include "core/ops/depthwise_conv2d.h"
#include "depthwise_tiled_model.h"
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

struct Run {
  Tensor y, dx, dw, db;  // host copies
};

Run run(const Backend& be, const DepthwiseConv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
        const Tensor& dy, bool want_dx) {
  auto k = make_kernel<DepthwiseConv2dKernel>(be.ctx(), p);
  Tensor x_ = be.upload(x), w_ = be.upload(w), b_ = be.upload(b), dy_ = be.upload(dy);
  Tensor y = be.upload(bc::nan_of(dy.shape(), x.dtype()));
  Tensor dx = want_dx ? be.upload(bc::nan_of(x.shape(), x.dtype())) : Tensor();
  Tensor dw = be.nan(w.shape()), db = p.bias ? be.nan(b.shape()) : Tensor();
  k->forward(x_, w_, b_, y);
  k->backward(x_, w_, dy_, dx, dw, db);
  return {be.download(y), want_dx ? be.download(dx) : Tensor(), be.download(dw), p.bias ? be.download(db) : Tensor()};
}

std::vector<float> floats_of(const Tensor& t) {
  const ref::Vec v = bc::values(t);
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace
#endif

// Random cases (a fuzz budget of 60; TRAINER_FUZZ_* as the other fast-path tests): 3x3 and 5x5,
// stride 1 and 2, 'same', 'valid' and explicit asymmetric padding (pad_fold's), batch 1 to 4 (and
// an empty batch), channels a multiple of the vector or not (then forward and backward data fall
// back to the general kernels, the filter gradient stays tiled), with and without bias and dx, f32,
// bf16 and f16 activations, dy with runs of exact zeros; case 0 is MobileNetV2's block_1 at batch 8,
// case 1 its first depthwise layer at batch 64. Each case: y and dx the general kernels' bits, dw
// and db the host model's bits (depthwise_tiled_model.h, on the widened values), the tiled kernels
// counted as taking what they should, the same bits on a second run.
TEST_CASE("depthwise_conv2d (cuda): dw_tiled gives the general kernels' y and dx bits and its host model's dw and db, "
          "f32, bf16 and f16, random shapes", "[fuzz]") {
  const Backend* gpu = gpu_backend();
  if (!gpu) return;
#ifdef TRAINER_HAVE_CUDA
  const Device dev = gpu->ctx().device();
  const FastPaths d = FastPaths::defaults();
  const Backend tiled{"cuda dw_tiled", gpu_context(dev, Precision::FP32, d.with(FastPath::DwTiled, true)), kCudaTolerance};
  const Backend general{"cuda general", gpu_context(dev, Precision::FP32, d), kCudaTolerance};
  const fz::Budget budget(60);
  int64_t ran = 0, all_tiled = 0;
  for (int64_t c = 0; budget.more(c); ++c) {
    if (budget.skip(c)) continue;
    std::mt19937_64 rng = budget.rng(c, 0xD77);
    DepthwiseConv2dParams p;
    p.kh = p.kw = uniform_int(rng, 0, 1) ? 3 : 5;
    p.sh = p.sw = int(uniform_int(rng, 1, 2));
    p.bias = uniform_int(rng, 0, 1) == 1;
    const int64_t mode = uniform_int(rng, 0, 2);
    p.padding = mode == 0 ? Padding::Same : Padding::Valid;
    if (mode == 2) {
      p.pad_top = int(uniform_int(rng, 0, 2)), p.pad_bottom = int(uniform_int(rng, 0, 2));
      p.pad_left = int(uniform_int(rng, 0, 2)), p.pad_right = int(uniform_int(rng, 0, 2));
    }
    int64_t n = uniform_int(rng, 1, 4), h = uniform_int(rng, 1, 40), w = uniform_int(rng, 1, 40);
    int64_t ch = uniform_int(rng, 0, 2) ? 8 * uniform_int(rng, 1, 12) : uniform_int(rng, 1, 100);
    const DType types[] = {DType::F32, DType::BF16, DType::F16};
    DType type = types[uniform_int(rng, 0, 2)];
    const bool want_dx = uniform_int(rng, 0, 5) > 0;
    if (c == 0) {  // MobileNetV2 block_1: zero_pad2d ((0, 1), (0, 1)) folded into a 'valid' 3x3 stride 2
      n = 8, h = w = 112, ch = 96, type = DType::F32;
      p.kh = p.kw = 3, p.sh = p.sw = 2, p.padding = Padding::Valid, p.bias = false;
      p.pad_top = p.pad_left = 0, p.pad_bottom = p.pad_right = 1;
    } else if (c == 1) {  // block_0's depthwise layer at batch 64, bf16
      n = 64, h = w = 112, ch = 32, type = DType::BF16;
      p.kh = p.kw = 3, p.sh = p.sw = 1, p.padding = Padding::Same, p.bias = false;
      p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 0;
    } else if (c == 2) {
      n = 0;  // an empty batch
    }
    const Shape xs{n, h, w, ch};
    const ConvGeometry g = depthwise_conv2d_geometry(xs, p);
    if (g.oh <= 0 || g.ow <= 0) continue;
    INFO(budget.repro(c) << ": x " << n << "x" << h << "x" << w << "x" << ch << " " << dtype_name(type) << ", "
                         << p.kh << "x" << p.kw << " stride " << p.sh << ", padding "
                         << (p.padding == Padding::Same ? "same" : "valid") << " " << p.pad_top << "/"
                         << p.pad_bottom << " x " << p.pad_left << "/" << p.pad_right << (p.bias ? ", bias" : "")
                         << (want_dx ? "" : ", no dx"));
    const Shape ys{n, g.oh, g.ow, ch};
    const Tensor x = bc::make(xs, type, bc::random_values(xs, rng, type));
    ref::Vec dyv = bc::random_values(ys, rng, type);
    for (double& e : dyv)
      if (uniform_int(rng, 0, 2) == 0) e = 0.0;  // a ReLU6 gate's zeros
    const Tensor dy = bc::make(ys, type, dyv);
    const Tensor wt = random_tensor(depthwise_conv2d_weight_shape(ch, p), rng);
    const Tensor b = p.bias ? random_tensor({ch}, rng) : Tensor();
    const int64_t before = cuda::path_calls(cuda::PathCount::DwTiled);
    const Run t = run(tiled, p, x, wt, b, dy, want_dx);
    const int64_t took = cuda::path_calls(cuda::PathCount::DwTiled) - before;
    const Run t2 = run(tiled, p, x, wt, b, dy, want_dx);
    const int64_t before_general = cuda::path_calls(cuda::PathCount::DwTiled);
    const Run r = run(general, p, x, wt, b, dy, want_dx);
    CHECK(cuda::path_calls(cuda::PathCount::DwTiled) == before_general);  // the general context never takes them
    const int vec = int(16 / dtype_size(type));
    const bool vectors = ch % vec == 0;
    INFO("tiled calls " << took);
    if (n == 0) CHECK(took == 0);
    else CHECK(took == (vectors ? (want_dx ? 3 : 2) : 1));
    all_tiled += took == 3;
    CHECK(bc::same_bits(t.y, r.y));
    if (want_dx) CHECK(bc::same_bits(t.dx, r.dx));
    CHECK(bc::same_bits(t.y, t2.y));
    CHECK(bc::same_bits(t.dw, t2.dw));
    if (n > 0) {
      const depthwise_math::DwShape s{n, h, w, ch, g.oh, g.ow, ch, 1, p.kh, p.kw, p.sh, p.sw, 1, 1, g.pt, g.pl};
      std::vector<float> mdw, mdb;
      const std::vector<float> xf = floats_of(x), dyf = floats_of(dy);
      dw_tiled::filter_model(s, xf.data(), dyf.data(), p.bias, mdw, mdb);
      const std::vector<float> gdw = floats_of(t.dw);
      CHECK(std::memcmp(gdw.data(), mdw.data(), mdw.size() * sizeof(float)) == 0);
      if (p.bias) {
        const std::vector<float> gdb = floats_of(t.db);
        CHECK(std::memcmp(gdb.data(), mdb.data(), mdb.size() * sizeof(float)) == 0);
      }
    } else {
      CHECK(bc::values(t.dw) == ref::Vec(size_t(t.dw.numel()), 0.0));
    }
    ++ran;
  }
  WARN("dw_tiled on the GPU: " << ran << " cases, " << all_tiled << " with all three kernels tiled");
  CHECK(ran > 0);
#endif
}
