// precision bf16 on the CPU: conv2d, depthwise conv2d and dense against float64 within a bf16 error bound (fp32: an fp32 one).
#include <functional>
#include <memory>
#include <sstream>

#include "core/ops/conv2d.h"
#include "core/ops/dense.h"
#include "core/ops/depthwise_conv2d.h"
#include "test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// The CPU contexts under test, two compute threads each (the fp32 one is the other op tests').
OpContext& ctx_of(Precision p) {
  static std::unique_ptr<OpContext> bf16 = make_context(Device::cpu(), ContextOptions{2, Precision::BF16});
  return p == Precision::BF16 ? *bf16 : cpu_ctx();
}

// The error bound of one output element that sums `terms` products a·b of f32 inputs (plus maybe a
// bias), where `mag` is Σ|a·b| (+|bias|): the float64 reference run on absolute values.
//   bf16: each operand is rounded to bf16 (8 significant bits, round to nearest even: relative
//   error <= u = 2^-8), so each product is off by <= (2u + u^2)|a·b| = (2^-7 + 2^-16)|a·b|. A
//   product of two bf16 values is exact in f32, and accumulating `terms` of them in f32 in any
//   order adds <= terms · 2^-24 · Σ|a·b|; 2^-23 per term (and one more for the bias) covers the
//   growth of the rounded terms and a separately rounded product.
//   fp32: the accumulation alone.
// The bf16 bound is the worst case of every rounding going the same way: random data reaches up to
// 0.83 of it (dx of a 3x3 depthwise convolution, 9 terms) and typically 0.1-0.5, while a wrong
// index, a missing tap or channel, or a misplaced gradient makes errors of the order of the
// outputs themselves.
double bound(Precision p, int64_t terms, double mag) {
  double acc = double(terms + 1) * 0x1p-23;
  return (p == Precision::BF16 ? 0x1p-7 + 0x1p-16 + acc : acc) * mag;
}

// Checks every element of `got` against the reference `want` within bound(p, terms, mag[i]), and
// returns the largest relative error |got - want| / mag seen.
double check_bound(const std::string& what, Precision p, const Tensor& got, const ref::Vec& want, const ref::Vec& mag,
                   int64_t terms) {
  REQUIRE(size_t(got.numel()) == want.size());
  double worst = 0, rel = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(double(got.f32()[i]) - want[i]), b = bound(p, terms, mag[i]);
    if (std::isnan(err)) err = INFINITY;
    if (mag[i] > 0) rel = std::max(rel, err / mag[i]);
    if (err - b > worst) worst = err - b, at = i;
  }
  INFO(what << " (" << precision_name(p) << ", " << terms << " terms): largest excess over the bound " << worst
            << " at " << at << "; largest relative error " << rel);
  CHECK(worst <= 0);
  return rel;
}

// The four outputs of one forward + backward, and the same from the reference.
struct Outputs {
  Tensor y, dx, dw, db;
};
struct Refs {
  ref::Vec y, dx, dw, db;
};

// A kernel on a context, as run(out, x, w, b, dy, backward): forward writes out.y, backward the rest.
using Run = std::function<void(Outputs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool)>;

// One op under test: its shapes, the number of products per element of each output, a kernel for a
// context (conv2d, depthwise conv2d and dense share forward(x, w, b, y) and backward(x, w, dy, dx,
// dw, db)) and the float64 reference.
struct Subject {
  std::string name;
  Shape xs, ws, ys;
  bool bias = true, want_dx = true;
  bool computes_bf16 = true;  // false: the kernel stays f32 under precision bf16 (depthwise)
  int64_t terms_y = 0, terms_dx = 0, terms_dw = 0;  // db sums as many terms as dw
  std::function<Run(OpContext&)> make;
  std::function<Refs(const ref::Vec& x, const ref::Vec& w, const ref::Vec* b, const ref::Vec& dy)> reference;
};

Subject subject(const std::string& name, const Shape& xs, const Shape& ws, const Shape& ys, bool bias, bool want_dx,
                int64_t terms_y, int64_t terms_dx, int64_t terms_dw) {
  Subject s;
  s.name = name, s.xs = xs, s.ws = ws, s.ys = ys, s.bias = bias, s.want_dx = want_dx;
  s.terms_y = terms_y, s.terms_dx = terms_dx, s.terms_dw = terms_dw;
  return s;
}

template <class Kernel>
auto runner(const typename Kernel::Params& p) {
  return [p](OpContext& c) {
    std::shared_ptr<Kernel> k = make_kernel<Kernel>(c, p);
    return [k](Outputs& o, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, bool backward) {
      if (!backward) return k->forward(x, w, b, o.y);
      k->backward(x, w, dy, o.dx, o.dw, o.db);
    };
  };
}

ref::Vec absolute(ref::Vec v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

// How the kernel is driven before the checked call (the last two guard against bf16 copies or
// reordered weights carried over stale from an earlier call):
//   kOneStep:      forward, then backward, on the same buffers (the graph's use).
//   kOtherBuffers: forward on other x and w buffers than backward gets.
//   kSecondStep:   one step on other values first, then the same buffers rewritten in place (a
//                  training loop).
enum class Drive { kOneStep, kOtherBuffers, kSecondStep };

// Fresh outputs for one call, NaN-filled so that elements a kernel fails to write are caught.
Outputs outputs(const Subject& s) {
  Outputs o;
  o.y = Tensor::empty(s.ys), o.dw = Tensor::empty(s.ws);
  if (s.want_dx) o.dx = Tensor::empty(s.xs);
  if (s.bias) o.db = Tensor::empty({s.ys.dims().back()});
  for (Tensor* t : {&o.y, &o.dx, &o.dw, &o.db})
    if (t->defined()) poison(*t);
  return o;
}

// Runs the subject on precision p (with `kernel` when given, else a new one) and checks y, dx, dw
// and db. Returns the largest relative error of y.
double exercise(const Subject& s, Precision p, Drive drive, uint64_t seed, Run* kernel = nullptr) {
  INFO(s.name << ", drive " << int(drive));
  std::mt19937_64 rng(seed);
  Tensor x = random_tensor(s.xs, rng), w = random_tensor(s.ws, rng), dy = random_tensor(s.ys, rng);
  Tensor b = s.bias ? random_tensor({s.ys.dims().back()}, rng) : Tensor();
  Run own = kernel ? Run() : s.make(ctx_of(p));
  Run& run = kernel ? *kernel : own;

  Outputs o = outputs(s);
  Tensor xb = x, wb = w;  // the buffers the kernel is given
  if (drive != Drive::kOneStep) {  // a forward on other values first
    xb = random_tensor(s.xs, rng), wb = random_tensor(s.ws, rng);
    run(o, xb, wb, b, dy, false);
  }
  if (drive == Drive::kSecondStep) {  // ... and its backward; then the checked values written over them
    run(o, xb, wb, b, dy, true);
    std::memcpy(xb.data(), x.data(), x.bytes());
    std::memcpy(wb.data(), w.data(), w.bytes());
  }
  if (drive == Drive::kOtherBuffers) xb = x, wb = w;  // backward alone on new buffers
  o = outputs(s);
  if (drive != Drive::kOtherBuffers) run(o, xb, wb, b, dy, false);
  run(o, xb, wb, b, dy, true);

  ref::Vec xv = to_vec(x), wv = to_vec(w), bv = s.bias ? to_vec(b) : ref::Vec(), dyv = to_vec(dy);
  ref::Vec bm = absolute(bv);
  Refs want = s.reference(xv, wv, s.bias ? &bv : nullptr, dyv);
  Refs mag = s.reference(absolute(xv), absolute(wv), s.bias ? &bm : nullptr, absolute(dyv));
  double rel = 0;
  if (drive != Drive::kOtherBuffers) rel = check_bound("y", p, o.y, want.y, mag.y, s.terms_y);
  if (s.want_dx) check_bound("dx", p, o.dx, want.dx, mag.dx, s.terms_dx);
  check_bound("dw", p, o.dw, want.dw, mag.dw, s.terms_dw);
  if (s.bias) check_bound("db", p, o.db, want.db, mag.db, s.terms_dw);
  return rel;
}

// conv2d on x [n, h, w, c] with f filters k x k.
Subject conv(int64_t n, int64_t h, int64_t w, int64_t c, int64_t f, int k, int stride = 1, int dil = 1,
             Padding pad = Padding::Same, bool bias = true, bool want_dx = true) {
  Conv2dParams p;
  p.filters = f, p.kh = p.kw = k, p.sh = p.sw = stride, p.dh = p.dw = dil, p.padding = pad, p.bias = bias;
  ConvGeometry g = conv2d_geometry({n, h, w, c}, p);
  ref::ConvDims d{n, h, w, c, g.oh, g.ow, f, k, k, stride, stride, dil, dil, g.pt, g.pl};
  std::ostringstream name;
  name << "conv2d x " << n << "x" << h << "x" << w << "x" << c << ", " << f << " filters " << k << "x" << k
       << ", stride " << stride << ", dilation " << dil << ", " << padding_name(pad) << (bias ? "" : ", no bias")
       << (want_dx ? "" : ", no dx");
  Subject s = subject(name.str(), {n, h, w, c}, conv2d_weight_shape(c, p), {n, g.oh, g.ow, f}, bias, want_dx,
                      k * k * c, k * k * f, n * g.oh * g.ow);
  s.make = runner<Conv2dKernel>(p);
  s.reference = [d](const ref::Vec& x, const ref::Vec& wv, const ref::Vec* b, const ref::Vec& dy) {
    Refs r;
    r.y = ref::conv2d_forward(d, x, wv, b);
    ref::conv2d_backward(d, x, wv, dy, r.dx, r.dw, r.db);
    return r;
  };
  return s;
}

// depthwise conv2d on x [n, h, w, c], multiplier m, k x k.
Subject depthwise(int64_t n, int64_t h, int64_t w, int64_t c, int m, int k, int stride = 1, Padding pad = Padding::Same,
                  bool bias = true) {
  DepthwiseConv2dParams p;
  p.multiplier = m, p.kh = p.kw = k, p.sh = p.sw = stride, p.padding = pad, p.bias = bias;
  ConvGeometry g = depthwise_conv2d_geometry({n, h, w, c}, p);
  ref::ConvDims d{n, h, w, c, g.oh, g.ow, g.oc, k, k, stride, stride, 1, 1, g.pt, g.pl};
  std::ostringstream name;
  name << "depthwise_conv2d x " << n << "x" << h << "x" << w << "x" << c << ", multiplier " << m << ", " << k << "x"
       << k << ", stride " << stride << ", " << padding_name(pad) << (bias ? "" : ", no bias");
  Subject s = subject(name.str(), {n, h, w, c}, depthwise_conv2d_weight_shape(c, p), {n, g.oh, g.ow, g.oc}, bias,
                      true, k * k, k * k * m, n * g.oh * g.ow);
  s.make = runner<DepthwiseConv2dKernel>(p);
  s.computes_bf16 = false;  // oneDNN's f32 depthwise kernels are the faster ones (cpu_onednn_conv.h)
  s.reference = [d](const ref::Vec& x, const ref::Vec& wv, const ref::Vec* b, const ref::Vec& dy) {
    Refs r;
    r.y = ref::depthwise_conv2d_forward(d, x, wv, b);
    ref::depthwise_conv2d_backward(d, x, wv, dy, r.dx, r.dw, r.db);
    return r;
  };
  return s;
}

// dense on x [..., k] (rows = all leading dims) with u units.
Subject dense(const Shape& xs, int64_t u, bool bias = true, bool want_dx = true) {
  DenseParams p;
  p.units = u, p.bias = bias;
  const int64_t k = xs.dims().back(), rows = xs.numel() / k;
  std::vector<int64_t> yd = xs.dims();
  yd.back() = u;
  Subject s = subject("dense x [" + xs.str() + "], " + std::to_string(u) + " units" + (bias ? "" : ", no bias") +
                          (want_dx ? "" : ", no dx"),
                      xs, {k, u}, Shape(yd), bias, want_dx, k, u, rows);
  s.make = runner<DenseKernel>(p);
  s.reference = [=](const ref::Vec& x, const ref::Vec& w, const ref::Vec* b, const ref::Vec& dy) {
    Refs r;
    r.y = ref::dense_forward(x, w, b, rows, k, u);
    ref::dense_backward(x, w, dy, rows, k, u, r.dx, r.dw, r.db);
    return r;
  };
  return s;
}

std::vector<Subject> subjects() {
  const Padding S = Padding::Same, V = Padding::Valid;
  return {
      conv(2, 12, 12, 3, 96, 3, 1, 1, S, true, false),  // a stem: 3 input channels, no dx
      conv(2, 12, 12, 96, 32, 1),                       // MiniGoogLeNet-sized: oneDNN's blocked kernels
      conv(2, 12, 12, 64, 48, 3),
      conv(2, 15, 15, 80, 80, 3, 2, 1, V),  // downsample
      conv(2, 7, 7, 240, 160, 3),
      conv(1, 7, 7, 4, 5, 3),             // batch 1, odd sizes
      conv(2, 9, 8, 3, 6, 5, 2),          // 5x5 stride 2
      conv(2, 9, 10, 3, 4, 3, 1, 2),      // dilation 2
      conv(3, 6, 6, 5, 7, 3, 1, 1, S, false),  // no bias
      depthwise(2, 9, 9, 16, 1, 3),
      depthwise(2, 10, 10, 24, 1, 3, 2),
      depthwise(2, 7, 7, 8, 2, 3, 1, V),  // multiplier 2
      depthwise(1, 5, 6, 32, 1, 5, 1, S, false),
      dense({7, 33}, 10),
      dense({2, 3, 17}, 5),               // rank 3: rows are every leading position
      dense({64, 1440}, 10, false),       // MiniGoogLeNet's classifier
      dense({5, 40}, 12, true, false),    // no dx
  };
}

}  // namespace

TEST_CASE("bf16: conv2d, depthwise conv2d and dense match float64 within the bf16 bound, and fp32 within the fp32 bound") {
  for (const Subject& s : subjects()) {
    double rel_bf16 = exercise(s, Precision::BF16, Drive::kOneStep, 11);
    double rel_fp32 = exercise(s, Precision::FP32, Drive::kOneStep, 11);
    // Evidence that bf16 really computed in bf16: its error is far above anything fp32 makes
    // (fp32 stays below (terms + 1) · 2^-23, under 2^-16 for these sizes).
    // Depthwise convolutions stay f32 under bf16: their error must stay at fp32's level.
    INFO(s.name << ": largest relative error of y, bf16 " << rel_bf16 << ", fp32 " << rel_fp32);
    if (s.computes_bf16)
      CHECK(rel_bf16 > 0x1p-16);
    else
      CHECK(rel_bf16 < 0x1p-16);
    CHECK(rel_fp32 < 0x1p-16);
  }
}

TEST_CASE("bf16: nothing stale is reused: backward after a forward on other buffers, a step after in-place updates") {
  for (const Subject& s : subjects()) {
    exercise(s, Precision::BF16, Drive::kOtherBuffers, 22);
    exercise(s, Precision::BF16, Drive::kSecondStep, 33);
  }
}

TEST_CASE("bf16: one kernel serves changing batch sizes from its shape cache") {
  OpContext& c = ctx_of(Precision::BF16);
  Run cv = conv(4, 8, 8, 16, 24, 3).make(c), dw = depthwise(4, 8, 8, 16, 1, 3).make(c), fc = dense({4, 24}, 7).make(c);
  for (int64_t n : {4, 1, 3, 4, 1}) {
    exercise(conv(n, 8, 8, 16, 24, 3), Precision::BF16, Drive::kSecondStep, uint64_t(40 + n), &cv);
    exercise(depthwise(n, 8, 8, 16, 1, 3), Precision::BF16, Drive::kSecondStep, uint64_t(50 + n), &dw);
    exercise(dense({n, 24}, 7), Precision::BF16, Drive::kSecondStep, uint64_t(60 + n), &fc);
  }
}
