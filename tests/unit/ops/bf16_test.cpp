// Mixed precision on every backend: conv2d, conv2d_transpose, depthwise conv2d and dense on bf16/f16 activations, and dense on f32 tensors in a bf16/fp16 context, against float64.
#include <functional>
#include <memory>
#include <sstream>

#include "bf16_check.h"
#include "core/ops/conv2d.h"
#include "core/ops/conv2d_transpose.h"
#include "core/ops/dense.h"
#include "core/ops/depthwise_conv2d.h"

using namespace trainer;
using namespace trainer::test;

namespace {

namespace b16 = trainer::test::bf16_check;
using b16::check_bound;
using b16::Low;
using b16::Rounding;

// Random values in [-1, 1) of type dt; in bf16/f16 exactly the kernel's inputs for the reference too.
Tensor random_of(const Shape& s, std::mt19937_64& rng, DType dt) {
  return b16::make(s, dt, b16::random_values(s, rng, dt));
}

// How a subject is run, on one (backend, low type) pair `lo`:
//   kFp32:        the backend's fp32 context, f32 tensors.
//   kLowContext:  a bf16/fp16 context, f32 tensors (what the graph gives a dense layer kept f32:
//                 the logits): dense converts its operands to the low type inside, the
//                 convolutions compute in fp32.
//   kLowTensors:  a bf16/fp16 context, low-precision activations x, y, dy and dx with f32 weights,
//                 bias and their gradients (what the graph gives the convolutions and dense
//                 layers): they compute in the low type.
enum class Mode { kFp32, kLowContext, kLowTensors };
const char* mode_name(Mode m) {
  return m == Mode::kFp32 ? "fp32" : m == Mode::kLowContext ? "low-precision context, f32 tensors" : "low-precision tensors";
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
  bool converts = false;    // a low-precision context makes the kernel round f32 operands (dense)
  bool takes_bf16 = false;  // the kernel takes low-precision activations (conv2d, depthwise)
  bool dw_low_on_gpu = false;  // on a GPU, its weight gradient comes out in the low type (cuDNN conv2d)
  bool bias_after_store = false;  // the bias is added to y once stored in the low type (conv2d_transpose)
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
// reordered weights, or a plan of the other type, carried over stale from an earlier call):
//   kOneStep:      forward, then backward, on the same buffers (the graph's use).
//   kOtherBuffers: forward on other x and w buffers than backward gets.
//   kSecondStep:   one step on other values first, then the same buffers rewritten in place (a
//                  training loop).
enum class Drive { kOneStep, kOtherBuffers, kSecondStep };

// Fresh outputs for one call with activations (y, dx) of type `act`, NaN-filled so that elements a
// kernel fails to write are caught.
Outputs outputs(const Subject& s, DType act) {
  Outputs o;
  o.y = b16::nan_of(s.ys, act), o.dw = b16::nan_of(s.ws, DType::F32);
  if (s.want_dx) o.dx = b16::nan_of(s.xs, act);
  if (s.bias) o.db = b16::nan_of({s.ys.dims().back()}, DType::F32);
  return o;
}

// Runs the subject in mode m on `lo` (with `kernel` when given, else a new one on m's context) and
// checks y, dx, dw and db. Returns the largest relative error of y.
double exercise(const Low& lo, const Subject& s, Mode m, Drive drive, uint64_t seed, Run* kernel = nullptr) {
  INFO(s.name << ", " << lo.name() << ", " << mode_name(m) << ", drive " << int(drive));
  // Low-precision activations are random f32 values rounded to the type: exact inputs for the reference.
  const DType act = m == Mode::kLowTensors ? lo.type : DType::F32;
  std::mt19937_64 rng(seed);
  Tensor x = random_of(s.xs, rng, act), w = random_tensor(s.ws, rng);
  Tensor dy = random_of(s.ys, rng, act);
  Tensor b = s.bias ? random_tensor({s.ys.dims().back()}, rng) : Tensor();
  OpContext& ctx = m == Mode::kFp32 ? lo.ctx() : lo.lctx();
  Run own = kernel ? Run() : s.make(ctx);
  Run& run = kernel ? *kernel : own;
  // Every buffer the kernel sees is allocated, filled and read back through the kernel's own
  // context (its stream and allocator), so the copies are ordered against its work.
  auto up = [&](const Tensor& h) { return Low::up(ctx, h); };
  Tensor dyd = up(dy), bd = up(b);

  auto fresh = [&] {  // outputs on the device
    Outputs o = outputs(s, act);
    for (Tensor* t : {&o.y, &o.dx, &o.dw, &o.db}) *t = up(*t);
    return o;
  };
  Outputs o = fresh();
  Tensor xb = up(x), wb = up(w);  // the buffers the kernel is given
  if (drive != Drive::kOneStep) {  // a forward on other values first
    xb = up(random_of(s.xs, rng, act)), wb = up(random_tensor(s.ws, rng));
    run(o, xb, wb, bd, dyd, false);
  }
  if (drive == Drive::kSecondStep) {  // ... and its backward; then the checked values written over them
    run(o, xb, wb, bd, dyd, true);
    ctx.copy_from_host(xb.data(), x.data(), x.bytes());
    ctx.copy_from_host(wb.data(), w.data(), w.bytes());
  }
  if (drive == Drive::kOtherBuffers) xb = up(x), wb = up(w);  // backward alone on new buffers
  o = fresh();
  if (drive != Drive::kOtherBuffers) run(o, xb, wb, bd, dyd, false);
  run(o, xb, wb, bd, dyd, true);
  for (Tensor* t : {&o.y, &o.dx, &o.dw, &o.db}) *t = Low::down(ctx, *t);

  ref::Vec xv = b16::values(x), wv = b16::values(w), bv = s.bias ? b16::values(b) : ref::Vec(), dyv = b16::values(dy);
  ref::Vec bm = absolute(bv);
  Refs want = s.reference(xv, wv, s.bias ? &bv : nullptr, dyv);
  Refs mag = s.reference(absolute(xv), absolute(wv), s.bias ? &bm : nullptr, absolute(dyv));
  // Where low-precision rounding enters: dense in a low context rounds both operands of every
  // product; conv2d on low tensors rounds w (y = Σ x·w, dx = Σ dy·w) and stores y and dx in the
  // low type, while dw = Σ x·dy and db = Σ dy have exact operands and stay f32 (an fp32 bound;
  // cuDNN's conv2d dw is stored in the low type first: one rounding). The GPU's depthwise kernel
  // multiplies by the f32 weights themselves: within the rounded-w bound.
  const double u = lo.u();
  Rounding r_y{0, false, u}, r_dx{0, false, u}, r_dw{0, false, u}, r_db{0, false, u};
  if (m == Mode::kLowContext && s.converts) r_y = r_dx = r_dw = r_db = {2, false, u};
  if (m == Mode::kLowTensors) {
    r_y = r_dx = {1, true, u};
    // A bias added to the stored y rounds once more: within u·Σ|x·w| more, one more operand's term.
    if (s.bias_after_store && s.bias) r_y.operands = 2;
    if (!lo.be->is_cpu() && s.dw_low_on_gpu) r_dw = {0, true, u};
  }
  double rel = 0;
  if (drive != Drive::kOtherBuffers) rel = check_bound("y", r_y, o.y, want.y, mag.y, s.terms_y);
  if (s.want_dx) check_bound("dx", r_dx, o.dx, want.dx, mag.dx, s.terms_dx);
  check_bound("dw", r_dw, o.dw, want.dw, mag.dw, s.terms_dw);
  if (s.bias) check_bound("db", r_db, o.db, want.db, mag.db, s.terms_dw);
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
  s.takes_bf16 = true;
  s.dw_low_on_gpu = true;
  s.reference = [d](const ref::Vec& x, const ref::Vec& wv, const ref::Vec* b, const ref::Vec& dy) {
    Refs r;
    r.y = ref::conv2d_forward(d, x, wv, b);
    ref::conv2d_backward(d, x, wv, dy, r.dx, r.dw, r.db);
    return r;
  };
  return s;
}

// conv2d_transpose by its definition, in float64: every input element x[n, i, j, c] scatters
// x·w[a, b, f, c] to y[n, i·s - pt + a·d, j·s - pl + b·d, f] (the taps outside y dropped), with pt, pl
// the padding of the convolution it transposes; dx, dw and db by the same index map.
struct TransposeDims {
  int64_t n, h, w, c, oh, ow, f;
  int k, s, d, pt, pl;
};
Refs transpose_reference(const TransposeDims& t, const ref::Vec& x, const ref::Vec& wv, const ref::Vec* b,
                         const ref::Vec& dy) {
  Refs r;
  r.y.assign(size_t(t.n * t.oh * t.ow * t.f), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(wv.size(), 0.0);
  r.db.assign(size_t(t.f), 0.0);
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t i = 0; i < t.h; ++i)
      for (int64_t j = 0; j < t.w; ++j)
        for (int a = 0; a < t.k; ++a)
          for (int bb = 0; bb < t.k; ++bb) {
            const int64_t oi = i * t.s - t.pt + int64_t(a) * t.d, oj = j * t.s - t.pl + int64_t(bb) * t.d;
            if (oi < 0 || oi >= t.oh || oj < 0 || oj >= t.ow) continue;
            for (int64_t c = 0; c < t.c; ++c) {
              const size_t xi = size_t(((n * t.h + i) * t.w + j) * t.c + c);
              for (int64_t f = 0; f < t.f; ++f) {
                const size_t yi = size_t(((n * t.oh + oi) * t.ow + oj) * t.f + f);
                const size_t wi = size_t(((int64_t(a) * t.k + bb) * t.f + f) * t.c + c);
                r.y[yi] += x[xi] * wv[wi];
                r.dx[xi] += dy[yi] * wv[wi];
                r.dw[wi] += x[xi] * dy[yi];
              }
            }
          }
  for (size_t i = 0; i < dy.size(); ++i) {
    r.db[i % size_t(t.f)] += dy[i];
    if (b) r.y[i] += (*b)[i % size_t(t.f)];
  }
  return r;
}

// conv2d_transpose on x [n, h, w, c] with f filters k x k (Keras's output_padding: -1 for None).
Subject conv_transpose(int64_t n, int64_t h, int64_t w, int64_t c, int64_t f, int k, int stride, int dil = 1,
                       Padding pad = Padding::Same, int out_pad = -1, bool bias = true, bool want_dx = true) {
  Conv2dTransposeParams p;
  p.filters = f, p.kh = p.kw = k, p.sh = p.sw = stride, p.dh = p.dw = dil, p.padding = pad, p.bias = bias;
  p.out_pad_h = p.out_pad_w = out_pad;
  const Shape o = conv2d_transpose_output_shape({h, w, c}, p);
  const ConvGeometry g = conv2d_geometry({n, o[0], o[1], f}, conv2d_transpose_conv(p, c));  // from y to x
  REQUIRE(conv2d_transpose_fits({h, w, c}, p));
  const TransposeDims t{n, h, w, c, o[0], o[1], f, k, stride, dil, g.pt, g.pl};
  std::ostringstream name;
  name << "conv2d_transpose x " << n << "x" << h << "x" << w << "x" << c << ", " << f << " filters " << k << "x" << k
       << ", stride " << stride << ", dilation " << dil << ", " << padding_name(pad) << ", output_padding " << out_pad
       << (bias ? "" : ", no bias") << (want_dx ? "" : ", no dx");
  Subject s = subject(name.str(), {n, h, w, c}, {k, k, f, c}, {n, o[0], o[1], f}, bias, want_dx, k * k * c, k * k * f,
                      n * o[0] * o[1]);
  s.make = [p, c](OpContext& ctx) {
    auto op = std::make_shared<Conv2dTranspose>(ctx, p, c);
    return Run([op](Outputs& out, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, bool backward) {
      if (!backward) return op->forward(x, w, b, out.y);
      op->backward(x, w, dy, out.dx, out.dw, out.db);
    });
  };
  s.takes_bf16 = true;
  s.dw_low_on_gpu = true;
  s.bias_after_store = true;
  s.reference = [t](const ref::Vec& x, const ref::Vec& wv, const ref::Vec* b, const ref::Vec& dy) {
    return transpose_reference(t, x, wv, b, dy);
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
  s.takes_bf16 = true;
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
  s.converts = true;
  s.takes_bf16 = true;
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
      conv_transpose(2, 6, 6, 32, 16, 3, 2),           // a decoder's 2x upsampling, 'same'
      conv_transpose(2, 5, 4, 8, 6, 3, 2, 1, V),       // valid: (in - 1)·2 + 3
      conv_transpose(1, 3, 5, 1, 3, 4, 2, 1, S, 1),    // batch 1, one channel, output_padding 1
      conv_transpose(2, 4, 3, 5, 2, 1, 3, 1, V),       // a kernel smaller than its stride: zero rows
      conv_transpose(2, 5, 5, 4, 7, 3, 1, 2, S, -1, false),  // dilation 2, no bias
      conv_transpose(2, 4, 4, 6, 5, 2, 2, 1, V, 1, true, false),  // no dx, valid with output_padding
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

// The modes a subject runs in under a low-precision context.
std::vector<Mode> low_modes(const Subject& s) {
  if (s.takes_bf16) return {Mode::kLowTensors, Mode::kLowContext};
  return {Mode::kLowContext};
}

}  // namespace

TEST_CASE("mixed precision: conv2d, conv2d_transpose, depthwise conv2d and dense on low tensors, and dense in a low context, match float64 within the bound", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    for (const Subject& s : subjects()) {
      double rel_fp32 = exercise(lo, s, Mode::kFp32, Drive::kOneStep, 11);
      double rel_ctx = exercise(lo, s, Mode::kLowContext, Drive::kOneStep, 11);
      // Evidence of the type each computed in: the low type's error is far above anything fp32
      // makes (fp32 stays below (terms + 1) · 2^-23, under 2^-16 for these sizes). Under a low
      // context, f32 tensors compute in it only in dense; the convolutions stay at fp32's level.
      INFO(s.name << ": largest relative error of y, fp32 " << rel_fp32 << ", low context " << rel_ctx);
      CHECK(rel_fp32 < 0x1p-16);
      if (s.converts)
        CHECK(rel_ctx > 0x1p-16);
      else
        CHECK(rel_ctx < 0x1p-16);
      if (s.takes_bf16) exercise(lo, s, Mode::kLowTensors, Drive::kOneStep, 11);
    }
  }
}

TEST_CASE("mixed precision: nothing stale is reused: backward after a forward on other buffers, a step after in-place updates", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    for (const Subject& s : subjects())
      for (Mode m : low_modes(s)) {
        exercise(lo, s, m, Drive::kOtherBuffers, 22);
        exercise(lo, s, m, Drive::kSecondStep, 33);
      }
  }
}

TEST_CASE("mixed precision: one kernel serves changing batch sizes, and f32 and low inputs of one shape, from its shape cache", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    OpContext& c = lo.lctx();
    Run cv = conv(4, 8, 8, 16, 24, 3).make(c), dw = depthwise(4, 8, 8, 16, 1, 3).make(c), fc = dense({4, 24}, 7).make(c);
    for (int64_t n : {4, 1, 3, 4, 1}) {
      for (Mode m : {Mode::kLowTensors, Mode::kLowContext})
        exercise(lo, conv(n, 8, 8, 16, 24, 3), m, Drive::kSecondStep, uint64_t(40 + n), &cv);
      for (Mode m : {Mode::kLowTensors, Mode::kLowContext})
        exercise(lo, depthwise(n, 8, 8, 16, 1, 3), m, Drive::kSecondStep, uint64_t(50 + n), &dw);
      for (Mode m : {Mode::kLowTensors, Mode::kLowContext})
        exercise(lo, dense({n, 24}, 7), m, Drive::kSecondStep, uint64_t(60 + n), &fc);
    }
  }
}

TEST_CASE("mixed precision: conv2d, depthwise conv2d and dense take all-f32 or all-low activations with f32 weights", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(70);
    OpContext& c = lo.lctx();
    const DType F = DType::F32, B = lo.type;
    auto up = [&](const Tensor& h) { return Low::up(c, h); };  // the kernels' own context (bf16_check.h)
    Subject s = conv(2, 6, 6, 8, 8, 3);  // 'same': y and dy have x's shape, and so do dx
    Tensor w = up(random_tensor(s.ws, rng)), b = up(random_tensor({8}, rng));
    auto k = make_kernel<Conv2dKernel>(c, Conv2dParams{8, 3, 3, 1, 1, 1, 1, Padding::Same, true});
    auto act = [&](DType t) { return up(random_of(s.xs, rng, t)); };
    Tensor dw = c.empty(s.ws), db = c.empty({8});
    // Forward: y must have x's type; weights and bias f32.
    for (DType xt : {F, B}) {
      Tensor x = act(xt), y_other = act(xt == F ? B : F), y = act(xt);
      CHECK_THROWS_AS(k->forward(x, w, b, y_other), std::invalid_argument);
      CHECK_THROWS_AS(k->forward(x, up(b16::nan_of(s.ws, B)), b, y), std::invalid_argument);
      CHECK_THROWS_AS(k->forward(x, w, up(b16::nan_of({8}, B)), y), std::invalid_argument);
      REQUIRE_NOTHROW(k->forward(x, w, b, y));
    }
    // Backward: dy and dx of x's type, dw and db f32.
    Tensor x = act(B), dy = act(B), dx = act(B);
    Tensor dw16 = up(b16::nan_of(s.ws, B)), db16 = up(b16::nan_of({8}, B)), dy32 = act(F), dx32 = act(F);
    CHECK_THROWS_AS(k->backward(x, w, dy32, dx, dw, db), std::invalid_argument);
    CHECK_THROWS_AS(k->backward(x, w, dy, dx32, dw, db), std::invalid_argument);
    CHECK_THROWS_AS(k->backward(x, w, dy, dx, dw16, db), std::invalid_argument);
    CHECK_THROWS_AS(k->backward(x, w, dy, dx, dw, db16), std::invalid_argument);
    CHECK_THROWS_AS(k->backward(act(F), w, dy, dx, dw, db), std::invalid_argument);
    REQUIRE_NOTHROW(k->backward(x, w, dy, dx, dw, db));
    Tensor i32 = up(Tensor::empty(s.xs, DType::I32)), y = act(B);
    CHECK_THROWS_AS(k->forward(i32, w, b, y), std::invalid_argument);

    // Depthwise: the same rules ('same', multiplier 1: y, dy and dx have x's shape).
    DepthwiseConv2dParams dp;
    dp.kh = dp.kw = 3, dp.padding = Padding::Same;
    auto dk = make_kernel<DepthwiseConv2dKernel>(c, dp);
    Tensor dwt = up(random_tensor(depthwise_conv2d_weight_shape(8, dp), rng)), dwb = up(random_tensor({8}, rng));
    Tensor ddw = c.empty(dwt.shape()), ddb = c.empty({8});
    Tensor y32 = act(F);
    CHECK_THROWS_AS(dk->forward(act(B), dwt, dwb, y32), std::invalid_argument);
    CHECK_THROWS_AS(dk->forward(act(F), dwt, dwb, y), std::invalid_argument);
    CHECK_THROWS_AS(dk->forward(act(B), up(b16::nan_of(dwt.shape(), B)), dwb, y), std::invalid_argument);
    CHECK_THROWS_AS(dk->backward(act(B), dwt, act(F), dx, ddw, ddb), std::invalid_argument);
    CHECK_THROWS_AS(dk->backward(act(B), dwt, act(B), dx32, ddw, ddb), std::invalid_argument);
    CHECK_THROWS_AS(dk->backward(act(B), dwt, act(B), dx, dw16, ddb), std::invalid_argument);
    REQUIRE_NOTHROW(dk->forward(act(B), dwt, dwb, y));
    REQUIRE_NOTHROW(dk->backward(act(B), dwt, act(B), dx, ddw, ddb));
    REQUIRE_NOTHROW(dk->forward(act(F), dwt, dwb, y32));

    // Dense on x [4, 6] -> [4, 5]: the same rules.
    auto fk = make_kernel<DenseKernel>(c, DenseParams{5, true});
    auto rows = [&](int64_t cols, DType t) { return up(random_of({4, cols}, rng, t)); };
    Tensor fw = up(random_tensor({6, 5}, rng)), fb = up(random_tensor({5}, rng));
    Tensor fdw = c.empty({6, 5}), fdb = c.empty({5}), fdw16 = up(b16::nan_of({6, 5}, B));
    Tensor fx = rows(6, B), fx32 = rows(6, F), fy = rows(5, B), fy32 = rows(5, F), fdy = rows(5, B), fdy32 = rows(5, F);
    Tensor fdx = rows(6, B), fdx32 = rows(6, F);
    CHECK_THROWS_AS(fk->forward(fx, fw, fb, fy32), std::invalid_argument);
    CHECK_THROWS_AS(fk->forward(fx32, fw, fb, fy), std::invalid_argument);
    CHECK_THROWS_AS(fk->forward(fx, fdw16, fb, fy), std::invalid_argument);
    CHECK_THROWS_AS(fk->backward(fx, fw, fdy32, fdx, fdw, fdb), std::invalid_argument);
    CHECK_THROWS_AS(fk->backward(fx, fw, fdy, fdx32, fdw, fdb), std::invalid_argument);
    CHECK_THROWS_AS(fk->backward(fx, fw, fdy, fdx, fdw16, fdb), std::invalid_argument);
    REQUIRE_NOTHROW(fk->forward(fx, fw, fb, fy));
    REQUIRE_NOTHROW(fk->backward(fx, fw, fdy, fdx, fdw, fdb));
    REQUIRE_NOTHROW(fk->forward(fx32, fw, fb, fy32));
  }
}
