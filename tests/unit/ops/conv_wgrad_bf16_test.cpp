// The AVX512-BF16 convolution weight gradient (ConvWgradBf16) against float64 on every window shape, one and two threads.
#include "core/ops/cpu/cpu_conv_wgrad_bf16.h"

#include <cmath>
#include <sstream>

#include "../cpu_bf16.h"
#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
namespace b16 = trainer::test::bf16_check;

namespace {

struct Case {
  int64_t n, h, w, c, f;
  int kh, kw, sh = 1, sw = 1, dh = 1, dw = 1;
  Padding pad = Padding::Same;
  const char* why = "";
};

// dw and db against the float64 reference on the same bf16 values: every product of two bf16
// values is exact in f32 and the kernel adds them in f32, so each element is within
// (terms + 1) · 2^-23 · Σ|x·dy| (bf16_test.cpp's bound without rounded operands), terms = N·OH·OW.
void check(const Case& k, int threads, std::mt19937_64& rng) {
  Conv2dParams p;
  p.filters = k.f, p.kh = k.kh, p.kw = k.kw, p.sh = k.sh, p.sw = k.sw, p.dh = k.dh, p.dw = k.dw, p.padding = k.pad;
  const ConvGeometry g = conv2d_geometry({k.n, k.h, k.w, k.c}, p);
  std::ostringstream what;
  what << k.why << ": x " << k.n << "x" << k.h << "x" << k.w << "x" << k.c << ", " << k.f << " filters " << k.kh << "x"
       << k.kw << ", stride " << k.sh << "x" << k.sw << ", dilation " << k.dh << "x" << k.dw << ", "
       << padding_name(k.pad) << ", " << threads << " thread(s)";
  INFO(what.str());
  REQUIRE(g.oh > 0);
  REQUIRE(g.ow > 0);

  const Shape xs{k.n, k.h, k.w, k.c}, ys{k.n, g.oh, g.ow, k.f}, ws = conv2d_weight_shape(k.c, p);
  ref::Vec xv = b16::random_values(xs, rng, DType::BF16), dyv = b16::random_values(ys, rng, DType::BF16);
  Tensor x = b16::make(xs, DType::BF16, xv), dy = b16::make(ys, DType::BF16, dyv);
  Tensor dw = b16::nan_of(ws, DType::F32), db = b16::nan_of({k.f}, DType::F32);

  auto ctx = make_context(Device::cpu(), ContextOptions{threads, Precision::BF16});
  cpu::ConvWgradBf16 kernel(cpu_context(*ctx), g, {k.kh, k.kw, k.sh, k.sw, k.dh, k.dw});
  kernel.run(x, dy, dw, &db);

  ref::ConvDims d{k.n, k.h, k.w, k.c, g.oh, g.ow, k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, g.pt, g.pl};
  ref::Vec wv(size_t(ws.numel()), 0.0), dx, want_dw, want_db, mag_dw, mag_db;
  ref::conv2d_backward(d, xv, wv, dyv, dx, want_dw, want_db);
  for (double& v : xv) v = std::fabs(v);
  for (double& v : dyv) v = std::fabs(v);
  ref::conv2d_backward(d, xv, wv, dyv, dx, mag_dw, mag_db);

  const double per_term = double(k.n * g.oh * g.ow + 1) * 0x1p-23;
  auto expect = [&](const char* name, const Tensor& got, const ref::Vec& want, const ref::Vec& mag) {
    double worst = 0;  // largest fraction of the bound
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(double(got.f32()[i]) - want[i]), bound = per_term * mag[i];
      if (!(err <= bound)) ++bad;  // NaN (an element never written) counts
      if (bound > 0) worst = std::max(worst, err / bound);
    }
    INFO(name << ": " << bad << " of " << want.size() << " elements outside the bound; largest fraction " << worst);
    CHECK(bad == 0);
  };
  expect("dw", dw, want_dw, mag_dw);
  expect("db", db, want_db, mag_db);

  // The same call again gives the same bits (fixed partition and summation order).
  Tensor dw2 = b16::nan_of(ws, DType::F32);
  kernel.run(x, dy, dw2, nullptr);
  CHECK(std::memcmp(dw.data(), dw2.data(), dw.bytes()) == 0);
}

}  // namespace

TEST_CASE("conv weight gradient on AVX512-BF16: every window, batch and channel count against float64, 1 and 2 threads") {
  if (!cpu_bf16_refusal().empty()) {
    WARN(cpu_bf16_skip_message());
    return;
  }
  if (!cpu::ConvWgradBf16::available()) {
    WARN("conv weight gradient on AVX512-BF16: skipped \xe2\x80\x94 this CPU has no AVX512_BF16 (oneDNN computes it)");
    return;
  }
  const Padding V = Padding::Valid;
  const std::vector<Case> cases = {
      {1, 7, 7, 4, 5, 3, 3, 1, 1, 1, 1, Padding::Same, "batch 1, odd sizes, 5 filters padded to 16"},
      {3, 6, 6, 5, 7, 3, 3, 1, 1, 1, 1, Padding::Same, "odd batch: the last image has no partner"},
      {5, 9, 9, 1, 1, 3, 3, 1, 1, 1, 1, Padding::Same, "one channel in and out"},
      {2, 12, 12, 96, 32, 1, 1, 1, 1, 1, 1, V, "1x1, two vectors of outputs"},
      {2, 12, 12, 64, 48, 3, 3, 1, 1, 1, 1, Padding::Same, "three vectors"},
      {4, 15, 15, 80, 80, 3, 3, 2, 2, 1, 1, V, "stride 2, valid: five vectors (64 + 16)"},
      {2, 7, 7, 240, 160, 3, 3, 1, 1, 1, 1, Padding::Same, "many channels: several input blocks and a tail"},
      {2, 9, 8, 3, 6, 5, 5, 2, 2, 1, 1, Padding::Same, "5x5 stride 2"},
      {2, 9, 10, 3, 4, 3, 3, 1, 1, 2, 2, Padding::Same, "dilation 2"},
      {2, 6, 9, 8, 17, 1, 3, 1, 1, 1, 1, Padding::Same, "1x3 kernel, 17 filters"},
      {2, 7, 7, 6, 16, 2, 2, 1, 1, 1, 1, Padding::Same, "even kernel: padding on one side only"},
      {3, 40, 40, 64, 64, 3, 3, 1, 1, 1, 1, Padding::Same, "an image larger than a chunk: bands of rows"},
      {1, 64, 63, 48, 32, 3, 3, 2, 2, 1, 1, Padding::Same, "bands of rows at stride 2, odd width"},
      {9, 8, 8, 37, 64, 3, 3, 1, 1, 1, 1, Padding::Same, "several pairs per chunk, odd pairs per thread"},
      {4, 10, 10, 3, 96, 3, 3, 1, 1, 1, 1, Padding::Same, "3 channels (conv1): a kernel row's taps as one run of 9"},
      {2, 9, 9, 5, 20, 3, 3, 1, 2, 2, 1, Padding::Same, "dilation in height only: taps still merged"},
      {2, 9, 11, 5, 20, 3, 3, 1, 1, 1, 2, Padding::Same, "dilation in width only: taps apart"},
  };
  std::mt19937_64 rng(2711);
  for (const Case& k : cases)
    for (int threads : {1, 2}) check(k, threads, rng);
}
