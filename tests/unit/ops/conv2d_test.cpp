// conv2d tests: forward/backward against the float64 reference on corner and random shapes, caching, errors.
#include "core/ops/conv2d.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "../cpu_bf16.h"
#include "backends.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct ConvCase {
  int64_t n, h, w, c, f;
  int kh, kw, sh = 1, sw = 1, dh = 1, dw = 1;
  Padding pad = Padding::Valid;
  bool bias = true;
  bool want_dx = true;
  int pl = 0, pr = 0;  // explicit zeros before/after each row (valid windows): conv1d's causal padding
};

std::string describe(const ConvCase& k) {
  std::ostringstream s;
  s << "x " << k.n << "x" << k.h << "x" << k.w << "x" << k.c << ", " << k.f << " filters " << k.kh << "x" << k.kw
    << ", stride " << k.sh << "x" << k.sw << ", dilation " << k.dh << "x" << k.dw << ", " << padding_name(k.pad)
    << (k.bias ? "" : ", no bias") << (k.want_dx ? "" : ", no dx") << ", row pads " << k.pl << "/" << k.pr;
  return s.str();
}

Conv2dParams params_of(const ConvCase& k) {
  Conv2dParams p;
  p.filters = k.f;
  p.kh = k.kh, p.kw = k.kw, p.sh = k.sh, p.sw = k.sw, p.dh = k.dh, p.dw = k.dw;
  p.padding = k.pad;
  p.bias = k.bias;
  p.pad_left = k.pl, p.pad_right = k.pr;
  return p;
}

// Runs forward and backward of `kernel` (made from the case on `be` when null) on backend `be` and
// checks every output against the float64 reference.
void check_case(const Backend& be, const ConvCase& k, std::mt19937_64& rng, Conv2dKernel* kernel = nullptr) {
  INFO(describe(k));
  Conv2dParams p = params_of(k);
  std::unique_ptr<Conv2dKernel> own;
  if (!kernel) {
    own = make_kernel<Conv2dKernel>(be.ctx(), p);
    kernel = own.get();
  }
  Shape xs{k.n, k.h, k.w, k.c};
  ConvGeometry g = conv2d_geometry(xs, p);
  REQUIRE(g.oh > 0);
  REQUIRE(g.ow > 0);
  Tensor hx = random_tensor(xs, rng);
  Tensor hw = random_tensor(conv2d_weight_shape(k.c, p), rng);
  Tensor hb = k.bias ? random_tensor({k.f}, rng) : Tensor();
  Tensor x = be.upload(hx), w = be.upload(hw), b = be.upload(hb);
  Tensor y = be.nan({k.n, g.oh, g.ow, k.f});
  kernel->forward(x, w, b, y);

  ref::ConvDims d{k.n, k.h, k.w, k.c, g.oh, g.ow, k.f, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, g.pt, g.pl};
  ref::Vec xv = to_vec(hx), wv = to_vec(hw), bv = k.bias ? to_vec(hb) : ref::Vec();
  be.check("y", y, ref::conv2d_forward(d, xv, wv, k.bias ? &bv : nullptr));

  Tensor hdy = random_tensor(y.shape(), rng), dy = be.upload(hdy);
  Tensor dx = k.want_dx ? be.nan(xs) : Tensor();
  Tensor dw = be.nan(hw.shape());
  Tensor db = k.bias ? be.nan({k.f}) : Tensor();
  kernel->backward(x, w, dy, dx, dw, db);
  ref::Vec rdx, rdw, rdb;
  ref::conv2d_backward(d, xv, wv, to_vec(hdy), rdx, rdw, rdb);
  if (k.want_dx) be.check("dx", dx, rdx);
  be.check("dw", dw, rdw);
  if (k.bias) be.check("db", db, rdb);
  if (k.want_dx) {  // backward_data (conv2d_transpose's forward): the same dx, bit for bit, without dw
    Conv2dParams nb = p;
    nb.bias = false;
    auto kd = make_kernel<Conv2dKernel>(be.ctx(), nb);
    Tensor dx2 = be.nan(xs);
    kd->backward_data(w, dy, dx2);
    CHECK(to_vec(be.download(dx2)) == to_vec(be.download(dx)));
  }
}

// A 1x1 convolution at stride 1 (its backward can add the input gradient into dx where the
// backend's kernel allows) and its operands on `be`: x, w, dy, and dx0, the host values dx holds.
struct PointwiseAdd {
  std::unique_ptr<Conv2dKernel> k;
  Shape xs{3, 5, 7, 21}, ys{3, 5, 7, 19};
  Tensor x, w, dy, dx0, dw, db;
  PointwiseAdd(const Backend& be, std::mt19937_64& rng) {
    Conv2dParams p;
    p.filters = 19, p.kh = 1, p.kw = 1;
    k = make_kernel<Conv2dKernel>(be.ctx(), p);
    x = be.upload(random_tensor(xs, rng)), w = be.upload(random_tensor({1, 1, 21, 19}, rng));
    dy = be.upload(random_tensor(ys, rng)), dx0 = random_tensor(xs, rng);
    dw = be.nan({1, 1, 21, 19}), db = be.nan({19});
  }
};

// bf16 tensors on `be`: f32 values rounded to nearest even (to_bf16) and back (bf16_values).
Tensor to_bf16(const Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::BF16);
  const Tensor f = be.download(t);
  for (int64_t i = 0; i < f.numel(); ++i) {
    uint32_t u;
    std::memcpy(&u, f.f32() + i, 4);
    h.as<uint16_t>()[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return be.upload(h);
}
ref::Vec bf16_values(const Backend& be, const Tensor& t) {
  const Tensor h = be.download(t);
  ref::Vec v(size_t(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) {
    const uint32_t u = uint32_t(h.as<uint16_t>()[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    v[size_t(i)] = f;
  }
  return v;
}

}  // namespace

TEST_CASE("conv2d geometry follows Keras 'same' padding (smaller half before)") {
  Conv2dParams p;
  p.filters = 1, p.kh = 4, p.kw = 2, p.sh = 1, p.sw = 2, p.padding = Padding::Same;
  ConvGeometry g = conv2d_geometry({1, 5, 5, 1}, p);
  CHECK(g.oh == 5);
  CHECK(g.pt == 1);
  CHECK(g.pb == 2);
  CHECK(g.ow == 3);
  CHECK(g.pl == 0);
  CHECK(g.pr == 1);
}

TEST_CASE("conv2d forward and backward match float64 reference on corner cases", "[backends]") {
  const Padding S = Padding::Same, V = Padding::Valid;
  std::vector<ConvCase> cases = {
      {2, 5, 6, 3, 4, 1, 1},                              // pointwise
      {1, 7, 7, 4, 5, 3, 3, 1, 1, 1, 1, S},               // batch 1, 3x3 same
      {2, 9, 8, 3, 6, 5, 5, 2, 2, 1, 1, S},               // 5x5 stride 2 same
      {2, 13, 11, 2, 3, 7, 7, 3, 3, 1, 1, V},             // 7x7 stride 3 valid
      {2, 13, 12, 3, 4, 7, 7, 3, 3, 1, 1, S},             // 7x7 stride 3 same
      {2, 6, 7, 3, 4, 2, 2, 1, 1, 1, 1, S},               // even kernel, same: padding after only
      {2, 7, 9, 5, 3, 4, 4, 2, 2, 1, 1, S},               // even kernel, stride 2, same
      {2, 2, 3, 3, 4, 5, 5, 1, 1, 1, 1, S},               // input smaller than the kernel, same
      {1, 1, 1, 3, 2, 3, 3, 1, 1, 1, 1, S},               // 1x1 input, 3x3 same
      {2, 4, 4, 3, 2, 3, 3, 3, 3, 1, 1, S},               // stride 3 same on 4 -> 2
      {2, 9, 10, 3, 4, 3, 3, 1, 1, 2, 2, S},              // dilation 2 same
      {2, 11, 9, 2, 3, 3, 3, 2, 1, 2, 2, V},              // dilation 2 valid, stride 2x1
      {2, 8, 9, 3, 4, 3, 3, 1, 1, 2, 1, S},               // dilation 2x1
      {2, 7, 8, 3, 5, 1, 3, 1, 1, 1, 1, S},               // 1x3
      {2, 8, 7, 3, 5, 3, 1, 1, 1, 1, 1, S},               // 3x1
      {2, 9, 11, 4, 3, 3, 5, 1, 2, 1, 1, S},              // 3x5, stride 1x2
      {2, 10, 11, 3, 4, 2, 3, 2, 3, 1, 1, V},             // 2x3, stride 2x3 valid
      {3, 6, 6, 5, 7, 3, 3, 1, 1, 1, 1, S, false},        // no bias
      {2, 6, 6, 5, 7, 3, 3, 2, 2, 1, 1, V, true, false},  // no dx (first layer)
      {2, 3, 3, 2, 2, 3, 3, 1, 1, 1, 1, V},               // input equals kernel: 1x1 output
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(101);
    for (const auto& c : cases) check_case(be, c, rng);
  }
}

TEST_CASE("conv2d forward and backward match float64 reference on random shapes", "[backends]") {
  const int ks[] = {1, 2, 3, 5, 7};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(202);
    int done = 0;
    while (done < 40) {
      ConvCase c{uniform_int(rng, 1, 3),  uniform_int(rng, 1, 12), uniform_int(rng, 1, 12),
                 uniform_int(rng, 1, 9),  uniform_int(rng, 1, 10), ks[uniform_int(rng, 0, 4)],
                 ks[uniform_int(rng, 0, 4)]};
      c.sh = int(uniform_int(rng, 1, 3));
      c.sw = int(uniform_int(rng, 1, 3));
      c.dh = uniform_int(rng, 0, 4) == 0 ? 2 : 1;
      c.dw = uniform_int(rng, 0, 4) == 0 ? 2 : 1;
      c.pad = uniform_int(rng, 0, 1) ? Padding::Same : Padding::Valid;
      c.bias = uniform_int(rng, 0, 3) != 0;
      c.want_dx = uniform_int(rng, 0, 5) != 0;
      ConvGeometry g = conv2d_geometry({c.n, c.h, c.w, c.c}, params_of(c));
      if (g.oh == 0 || g.ow == 0) continue;  // the window does not fit: the layer rejects it
      check_case(be, c, rng);
      ++done;
    }
  }
}

// Explicit zeros before and after each row (Conv2dParams::pad_left/pad_right, valid windows): conv1d's
// causal padding, (k - 1)·dilation before a one-row image's steps, and unequal pads in general. On
// the GPU cuDNN takes the smaller pad on both sides and the rest is put around a padded copy of x
// (cuda_conv2d.cu): the second test runs the same cases on every backend.
ConvCase explicit_pad_case(std::mt19937_64& rng) {
  const int ks[] = {1, 2, 3, 5};
  ConvCase c{uniform_int(rng, 1, 3), uniform_int(rng, 0, 2) ? 1 : uniform_int(rng, 2, 4), uniform_int(rng, 1, 17),
             uniform_int(rng, 1, 7), uniform_int(rng, 1, 9), 1, ks[uniform_int(rng, 0, 3)]};
  c.sw = int(uniform_int(rng, 1, 3));
  c.dw = c.sw == 1 && uniform_int(rng, 0, 2) == 0 ? int(uniform_int(rng, 2, 3)) : 1;
  const bool causal = uniform_int(rng, 0, 2) != 0;
  c.pl = causal ? (c.kw - 1) * c.dw : int(uniform_int(rng, 0, 4));
  c.pr = causal ? 0 : int(uniform_int(rng, 0, 4));
  c.bias = uniform_int(rng, 0, 3) != 0;
  c.want_dx = uniform_int(rng, 0, 5) != 0;
  return c;
}

TEST_CASE("conv2d with explicit row padding (conv1d's causal) matches float64 reference on every backend", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(307);
    for (int done = 0; done < 40;) {
      const ConvCase c = explicit_pad_case(rng);
      if (conv2d_geometry({c.n, c.h, c.w, c.c}, params_of(c)).ow == 0) continue;
      check_case(be, c, rng);
      ++done;
    }
  }
}

TEST_CASE("conv2d with explicit row padding (conv1d's causal) matches float64 reference on random shapes, 1-3 threads") {
  for (int threads : {1, 2, 3}) {
    auto ctx = make_context(Device::cpu(), ContextOptions{threads});
    ctx->bind_thread();
    const Backend be{"cpu", ctx.get(), kCpuTolerance};
    std::mt19937_64 rng(303 + uint64_t(threads));
    for (int done = 0; done < 30;) {
      const ConvCase c = explicit_pad_case(rng);
      const bool causal = c.pr == 0 && c.pl == (c.kw - 1) * c.dw;
      INFO(threads << " threads");
      ConvGeometry g = conv2d_geometry({c.n, c.h, c.w, c.c}, params_of(c));
      if (g.ow == 0) continue;
      CHECK(g.pl == c.pl);
      CHECK(g.pr == c.pr);
      if (causal) CHECK(g.ow == (c.w - 1) / c.sw + 1);  // every step has an output, seeing steps <= its own
      check_case(be, c, rng);
      ++done;
    }
  }
}

TEST_CASE("conv2d matches float64 reference on MiniGoogLeNet-sized layers", "[backends]") {
  // Channel counts large enough for oneDNN's blocked (JIT / brgemm) implementations.
  const Padding S = Padding::Same, V = Padding::Valid;
  std::vector<ConvCase> cases = {
      {2, 12, 12, 3, 96, 3, 3, 1, 1, 1, 1, S, true, false},  // stem: 3 input channels, no dx
      {2, 12, 12, 96, 32, 1, 1, 1, 1, 1, 1, S},
      {2, 12, 12, 64, 48, 3, 3, 1, 1, 1, 1, S},
      {2, 15, 15, 80, 80, 3, 3, 2, 2, 1, 1, V},  // downsample
      {2, 7, 7, 160, 48, 1, 1, 1, 1, 1, 1, S},
      {2, 7, 7, 240, 160, 3, 3, 1, 1, 1, 1, S},
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(303);
    for (const auto& c : cases) check_case(be, c, rng);
  }
}

TEST_CASE("conv2d kernel serves changing batch sizes from its shape cache", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(404);
    ConvCase c{4, 8, 8, 16, 24, 3, 3, 1, 1, 1, 1, Padding::Same};
    auto kernel = make_kernel<Conv2dKernel>(be.ctx(), params_of(c));
    for (int64_t n : {4, 1, 3, 4, 1}) {
      c.n = n;
      check_case(be, c, rng, kernel.get());
    }
    c.h = 5;  // a new spatial size as well
    check_case(be, c, rng, kernel.get());
  }
}

TEST_CASE("conv2d handles an empty batch and rejects mismatched shapes", "[backends]") {
  Conv2dParams p;
  p.filters = 4, p.kh = 3, p.kw = 3, p.padding = Padding::Same;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(505);
    auto k = make_kernel<Conv2dKernel>(be.ctx(), p);
    Tensor w = be.upload(random_tensor({3, 3, 2, 4}, rng)), b = be.upload(random_tensor({4}, rng));
    Tensor x0 = be.empty({0, 5, 5, 2}), y0 = be.empty({0, 5, 5, 4});
    REQUIRE_NOTHROW(k->forward(x0, w, b, y0));
    Tensor dw = be.upload(random_tensor(w.shape(), rng)), db = be.upload(random_tensor({4}, rng));
    Tensor dx0 = be.empty(x0.shape());
    REQUIRE_NOTHROW(k->backward(x0, w, y0, dx0, dw, db));
    be.check("dw of an empty batch", dw, ref::Vec(size_t(dw.numel()), 0.0), 0.0);
    be.check("db of an empty batch", db, ref::Vec(4, 0.0), 0.0);

    Tensor x = be.upload(random_tensor({1, 5, 5, 2}, rng)), y = be.empty({1, 5, 5, 4});
    Tensor bad_w = be.upload(random_tensor({3, 3, 3, 4}, rng));
    CHECK_THROWS_AS(k->forward(x, bad_w, b, y), std::invalid_argument);
    Tensor bad_y = be.empty({1, 4, 5, 4});
    CHECK_THROWS_AS(k->forward(x, w, b, bad_y), std::invalid_argument);
    Tensor bad_b = be.upload(random_tensor({5}, rng));
    CHECK_THROWS_AS(k->forward(x, w, bad_b, y), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(x, w, Tensor(), y), std::invalid_argument);
    Tensor x3 = be.upload(random_tensor({5, 5, 2}, rng));
    CHECK_THROWS_AS(k->forward(x3, w, b, y), std::invalid_argument);
    // backward_data: a convolution without bias, dy of the output's shape.
    Tensor dy = be.upload(random_tensor({1, 5, 5, 4}, rng)), dx = be.empty({1, 5, 5, 2});
    CHECK_THROWS_WITH(k->backward_data(w, dy, dx), Catch::Contains("without bias"));
    Conv2dParams nb = p;
    nb.bias = false;
    auto kd = make_kernel<Conv2dKernel>(be.ctx(), nb);
    Tensor bad_dy = be.upload(random_tensor({1, 5, 4, 4}, rng));
    CHECK_THROWS_WITH(kd->backward_data(w, bad_dy, dx), Catch::Contains("dy"));
    REQUIRE_NOTHROW(kd->backward_data(w, y0, dx0));  // an empty batch
  }
}

TEST_CASE("conv2d backward adds its input gradient into dx where the backend can (1x1 at stride 1)", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(77);
    PointwiseAdd a(be, rng);
    Conv2dParams p3;
    p3.filters = 19, p3.kh = p3.kw = 3, p3.padding = Padding::Same;
    auto k3 = make_kernel<Conv2dKernel>(be.ctx(), p3);
    CHECK_FALSE(k3->adds_dx());  // the input gradient of a wider window is no 1x1 convolution of dy
    Tensor dx = be.upload(a.dx0);
    if (!a.k->adds_dx()) {
      CHECK_THROWS_WITH(a.k->backward(a.x, a.w, a.dy, dx, a.dw, a.db, true), Catch::Contains("cannot add the input gradient"));
      continue;
    }
    Tensor w3 = be.upload(random_tensor({3, 3, 21, 19}, rng)), dw3 = be.nan(w3.shape());
    CHECK_THROWS_WITH(k3->backward(a.x, w3, a.dy, dx, dw3, a.db, true), Catch::Contains("cannot add the input gradient"));
    Tensor none;
    CHECK_THROWS_WITH(a.k->backward(a.x, a.w, a.dy, none, a.dw, a.db, true), Catch::Contains("dx is undefined"));
    // dx0 + the reference input gradient; dw and db as without adding.
    ref::ConvDims d{3, 5, 7, 21, 5, 7, 19, 1, 1, 1, 1, 1, 1, 0, 0};
    ref::Vec rdx, rdw, rdb;
    ref::conv2d_backward(d, be.vec(a.x), be.vec(a.w), be.vec(a.dy), rdx, rdw, rdb);
    a.k->backward(a.x, a.w, a.dy, dx, a.dw, a.db, true);
    ref::Vec want = to_vec(a.dx0);
    for (size_t i = 0; i < want.size(); ++i) want[i] += rdx[i];
    be.check("dx0 + dx", dx, want);
    be.check("dw", a.dw, rdw);
    be.check("db", a.db, rdb);
  }
}

// bf16 activations on the CPU need oneDNN's bf16 convolutions (AVX-512): skipped without them.
TEST_CASE("conv2d backward adds its bf16 input gradient into dx where the backend can (1x1 at stride 1)", "[backends][bf16]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    if (be.is_cpu() && !cpu_bf16_refusal().empty()) {
      record_skip(Missing::CpuFeature, cpu_bf16_skip_message());
      continue;
    }
    std::mt19937_64 rng(77);
    PointwiseAdd a(be, rng);
    if (!a.k->adds_dx()) continue;  // refused: the f32 case above checks the refusal
    // dx0 + the input gradient rounded once, against the gradient written alone (rounded once
    // too) plus dx0: within two bf16 roundings of their magnitudes.
    Tensor xb = to_bf16(be, a.x), dyb = to_bf16(be, a.dy), dxb0 = to_bf16(be, be.upload(a.dx0));
    Tensor alone = be.upload(Tensor::empty(a.xs, DType::BF16)), added = to_bf16(be, be.upload(a.dx0));
    a.k->backward(xb, a.w, dyb, alone, a.dw, a.db);
    a.k->backward(xb, a.w, dyb, added, a.dw, a.db, true);
    const ref::Vec al = bf16_values(be, alone), s = bf16_values(be, added), d0 = bf16_values(be, dxb0);
    int64_t bad = 0;
    for (size_t i = 0; i < al.size(); ++i)
      if (!(std::fabs(s[i] - (al[i] + d0[i])) <= 0x1p-7 * (std::fabs(al[i]) + std::fabs(d0[i])) + 1e-30)) ++bad;
    CHECK(bad == 0);
  }
}

TEST_CASE("conv2d and its gradients are bit-identical from run to run") {
  // CPU only: resuming from a checkpoint must reproduce an uninterrupted run exactly on CPU
  // (DESIGN.md); cuDNN's fastest backward algorithms may reduce in a varying order.
  std::mt19937_64 rng(606);
  Conv2dParams p;
  p.filters = 48, p.kh = 3, p.kw = 3, p.padding = Padding::Same;
  auto k = make_kernel<Conv2dKernel>(cpu_ctx(), p);
  Tensor x = random_tensor({8, 15, 15, 64}, rng), w = random_tensor({3, 3, 64, 48}, rng), b = random_tensor({48}, rng);
  Tensor dy = random_tensor({8, 15, 15, 48}, rng);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    Tensor y = cpu_ctx().empty(dy.shape()), dx = cpu_ctx().empty(x.shape()), dw = cpu_ctx().empty(w.shape()),
           db = cpu_ctx().empty({48});
    k->forward(x, w, b, y);
    k->backward(x, w, dy, dx, dw, db);
    std::vector<float> all;
    for (Tensor* t : {&y, &dx, &dw, &db}) all.insert(all.end(), t->f32(), t->f32() + t->numel());
    runs.push_back(std::move(all));
  }
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
}
