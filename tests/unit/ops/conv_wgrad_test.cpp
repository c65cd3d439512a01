// Our AVX-512 convolution weight gradient (ConvWgrad, f32 and bf16) against float64 on every window shape, one and two threads.
#include "core/ops/cpu/cpu_conv_wgrad.h"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "../cpu_bf16.h"
#include "bf16_check.h"
#include "skip.h"

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

// dw and db against the float64 reference on the same values: every product of two bf16 values is
// exact in f32 and the kernel adds them in f32, so each element is within (terms + 1) · 2^-23 ·
// Σ|x·dy| (bf16_test.cpp's bound without rounded operands), terms = N·OH·OW; an f32 product is
// rounded once more (2^-24 relative), within one more term.
void check(const Case& k, int threads, DType t, std::mt19937_64& rng) {
  Conv2dParams p;
  p.filters = k.f, p.kh = k.kh, p.kw = k.kw, p.sh = k.sh, p.sw = k.sw, p.dh = k.dh, p.dw = k.dw, p.padding = k.pad;
  const ConvGeometry g = conv2d_geometry({k.n, k.h, k.w, k.c}, p);
  std::ostringstream what;
  what << k.why << ": x " << k.n << "x" << k.h << "x" << k.w << "x" << k.c << ", " << k.f << " filters " << k.kh << "x"
       << k.kw << ", stride " << k.sh << "x" << k.sw << ", dilation " << k.dh << "x" << k.dw << ", "
       << padding_name(k.pad) << ", " << threads << " thread(s), " << dtype_name(t);
  INFO(what.str());
  REQUIRE(g.oh > 0);
  REQUIRE(g.ow > 0);

  const Shape xs{k.n, k.h, k.w, k.c}, ys{k.n, g.oh, g.ow, k.f}, ws = conv2d_weight_shape(k.c, p);
  ref::Vec xv = b16::random_values(xs, rng, t), dyv = b16::random_values(ys, rng, t);
  Tensor x = b16::make(xs, t, xv), dy = b16::make(ys, t, dyv);
  Tensor dw = b16::nan_of(ws, DType::F32), db = b16::nan_of({k.f}, DType::F32);

  auto ctx = make_context(Device::cpu(), ContextOptions{threads, t == DType::BF16 ? Precision::BF16 : Precision::FP32});
  cpu::ConvWgrad kernel(cpu_context(*ctx), g, {k.kh, k.kw, k.sh, k.sw, k.dh, k.dw}, t);
  kernel.run(x, dy, dw, &db);

  ref::ConvDims d{k.n, k.h, k.w, k.c, g.oh, g.ow, k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, g.pt, g.pl};
  ref::Vec wv(size_t(ws.numel()), 0.0), dx, want_dw, want_db, mag_dw, mag_db;
  ref::conv2d_backward(d, xv, wv, dyv, dx, want_dw, want_db);
  for (double& v : xv) v = std::fabs(v);
  for (double& v : dyv) v = std::fabs(v);
  ref::conv2d_backward(d, xv, wv, dyv, dx, mag_dw, mag_db);

  const double per_term = double(k.n * g.oh * g.ow + (t == DType::BF16 ? 1 : 2)) * 0x1p-23;
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

// Every window shape the kernel meets: odd sizes, strides, dilations, channel tails, bands of rows.
std::vector<Case> window_cases() {
  const Padding V = Padding::Valid;
  return {
      {1, 7, 7, 4, 5, 3, 3, 1, 1, 1, 1, Padding::Same, "batch 1, odd sizes, 5 filters padded to 16"},
      {3, 6, 6, 5, 7, 3, 3, 1, 1, 1, 1, Padding::Same, "odd batch: in bf16 the last image has no partner"},
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
      {9, 8, 8, 37, 64, 3, 3, 1, 1, 1, 1, Padding::Same, "several groups (pairs, images) per chunk, odd per thread"},
      {4, 10, 10, 3, 96, 3, 3, 1, 1, 1, 1, Padding::Same, "3 channels (conv1): a kernel row's taps as one run of 9"},
      {2, 9, 9, 5, 20, 3, 3, 1, 2, 2, 1, Padding::Same, "dilation in height only: taps still merged"},
      {2, 9, 11, 5, 20, 3, 3, 1, 1, 1, 2, Padding::Same, "dilation in width only: taps apart"},
  };
}

// Every case on one and two threads in type t.
void check_all(DType t) {
  std::mt19937_64 rng(2711);
  for (const Case& k : window_cases())
    for (int threads : {1, 2}) check(k, threads, t, rng);
}

}  // namespace

TEST_CASE("our conv weight gradient in f32: every window, batch and channel count against float64, 1, 2 threads") {
  if (!cpu::ConvWgrad::available(DType::F32))
    TRAINER_SKIP(CpuFeature, "conv weight gradient in f32: this CPU has no AVX-512 (oneDNN computes it)");
  check_all(DType::F32);
}

TEST_CASE("our conv weight gradient in bf16: every window, batch and channel count against float64, 1, 2 threads") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_skip_message());
  if (!cpu::ConvWgrad::available(DType::BF16))
    TRAINER_SKIP(CpuFeature, "conv weight gradient in bf16: this CPU has no AVX512_BF16 (oneDNN computes it)");
  check_all(DType::BF16);
}

TEST_CASE("our conv weight gradient is chosen in bf16, and in f32 for strided windows and few input channels") {
  const char* saved = std::getenv("TRAINER_CONV_WGRAD");
  const std::string keep = saved ? saved : "";
  unsetenv("TRAINER_CONV_WGRAD");
  auto geometry = [](int64_t ic) { return ConvGeometry{8, 15, 15, ic, 15, 15, 64, 1, 1, 1, 1}; };
  const cpu::ConvWgrad::Window w3{3, 3, 1, 1, 1, 1}, s2{3, 3, 2, 2, 1, 1}, s12{3, 3, 1, 2, 1, 1};
  const int64_t few = cpu::ConvWgrad::kFewInputChannels;
  CHECK(cpu::ConvWgrad::preferred(DType::F32, geometry(3), w3));
  CHECK(cpu::ConvWgrad::preferred(DType::F32, geometry(few), w3));
  CHECK_FALSE(cpu::ConvWgrad::preferred(DType::F32, geometry(few + 1), w3));
  CHECK(cpu::ConvWgrad::preferred(DType::F32, geometry(336), s2));
  CHECK(cpu::ConvWgrad::preferred(DType::F32, geometry(336), s12));
  CHECK(cpu::ConvWgrad::preferred(DType::BF16, geometry(336), w3));
  setenv("TRAINER_CONV_WGRAD", "ours", 1);
  CHECK(cpu::ConvWgrad::preferred(DType::F32, geometry(336), w3));
  setenv("TRAINER_CONV_WGRAD", "onednn", 1);
  CHECK_FALSE(cpu::ConvWgrad::preferred(DType::BF16, geometry(3), w3));
  CHECK_FALSE(cpu::ConvWgrad::preferred(DType::F32, geometry(3), s2));
  setenv("TRAINER_CONV_WGRAD", "typo", 1);  // anything else: the rule above
  CHECK(cpu::ConvWgrad::preferred(DType::F32, geometry(3), w3));
  CHECK_FALSE(cpu::ConvWgrad::preferred(DType::F32, geometry(336), w3));
  if (saved)
    setenv("TRAINER_CONV_WGRAD", keep.c_str(), 1);
  else
    unsetenv("TRAINER_CONV_WGRAD");
}
