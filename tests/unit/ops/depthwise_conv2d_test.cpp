// depthwise_conv2d tests: forward/backward against the float64 reference on corner, random and MobileNetV2 shapes, caching, errors.
#include "core/ops/depthwise_conv2d.h"

#include <sstream>

#include "backends.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct DwCase {
  int64_t n, h, w, c;
  int m, kh, kw, sh = 1, sw = 1, dh = 1, dw = 1;
  Padding pad = Padding::Valid;
  bool bias = true;
  bool want_dx = true;
};

std::string describe(const DwCase& k) {
  std::ostringstream s;
  s << "x " << k.n << "x" << k.h << "x" << k.w << "x" << k.c << ", multiplier " << k.m << ", kernel " << k.kh << "x"
    << k.kw << ", stride " << k.sh << "x" << k.sw << ", dilation " << k.dh << "x" << k.dw << ", "
    << padding_name(k.pad) << (k.bias ? "" : ", no bias") << (k.want_dx ? "" : ", no dx");
  return s.str();
}

DepthwiseConv2dParams params_of(const DwCase& k) {
  DepthwiseConv2dParams p;
  p.multiplier = k.m;
  p.kh = k.kh, p.kw = k.kw, p.sh = k.sh, p.sw = k.sw, p.dh = k.dh, p.dw = k.dw;
  p.padding = k.pad;
  p.bias = k.bias;
  return p;
}

// Runs forward and backward of `kernel` (made from the case on `be` when null) on backend `be` and
// checks every output against the float64 reference.
void check_case(const Backend& be, const DwCase& k, std::mt19937_64& rng, DepthwiseConv2dKernel* kernel = nullptr) {
  INFO(describe(k));
  DepthwiseConv2dParams p = params_of(k);
  std::unique_ptr<DepthwiseConv2dKernel> own;
  if (!kernel) {
    own = make_kernel<DepthwiseConv2dKernel>(be.ctx(), p);
    kernel = own.get();
  }
  Shape xs{k.n, k.h, k.w, k.c};
  ConvGeometry g = depthwise_conv2d_geometry(xs, p);
  REQUIRE(g.oh > 0);
  REQUIRE(g.ow > 0);
  REQUIRE(g.oc == k.c * k.m);
  Tensor hx = random_tensor(xs, rng);
  Tensor hw = random_tensor(depthwise_conv2d_weight_shape(k.c, p), rng);
  Tensor hb = k.bias ? random_tensor({g.oc}, rng) : Tensor();
  Tensor x = be.upload(hx), w = be.upload(hw), b = be.upload(hb);
  Tensor y = be.nan({k.n, g.oh, g.ow, g.oc});
  kernel->forward(x, w, b, y);

  ref::ConvDims d{k.n, k.h, k.w, k.c, g.oh, g.ow, g.oc, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, g.pt, g.pl};
  ref::Vec xv = to_vec(hx), wv = to_vec(hw), bv = k.bias ? to_vec(hb) : ref::Vec();
  be.check("y", y, ref::depthwise_conv2d_forward(d, xv, wv, k.bias ? &bv : nullptr));

  Tensor hdy = random_tensor(y.shape(), rng), dy = be.upload(hdy);
  Tensor dx = k.want_dx ? be.nan(xs) : Tensor();
  Tensor dw = be.nan(hw.shape());
  Tensor db = k.bias ? be.nan({g.oc}) : Tensor();
  kernel->backward(x, w, dy, dx, dw, db);
  ref::Vec rdx, rdw, rdb;
  ref::depthwise_conv2d_backward(d, xv, wv, to_vec(hdy), rdx, rdw, rdb);
  if (k.want_dx) be.check("dx", dx, rdx);
  be.check("dw", dw, rdw);
  if (k.bias) be.check("db", db, rdb);
}

}  // namespace

TEST_CASE("depthwise_conv2d geometry: Keras 'same' padding, C * multiplier outputs, [kh, kw, C, M] weights") {
  DepthwiseConv2dParams p;
  p.multiplier = 3, p.kh = 3, p.kw = 4, p.sh = 2, p.sw = 1, p.padding = Padding::Same;
  ConvGeometry g = depthwise_conv2d_geometry({2, 8, 5, 7}, p);
  CHECK(g.oh == 4);
  CHECK(g.pt == 0);  // total 1: the smaller half (0) before
  CHECK(g.pb == 1);
  CHECK(g.ow == 5);
  CHECK(g.pl == 1);
  CHECK(g.pr == 2);
  CHECK(g.oc == 21);
  CHECK(depthwise_conv2d_output_shape({8, 5, 7}, p) == Shape{4, 5, 21});
  CHECK(depthwise_conv2d_weight_shape(7, p) == Shape{3, 4, 7, 3});
  p.padding = Padding::Valid;
  CHECK(depthwise_conv2d_output_shape({8, 5, 7}, p) == Shape{3, 2, 21});
}

TEST_CASE("depthwise_conv2d forward and backward match float64 reference on corner cases", "[backends]") {
  const Padding S = Padding::Same, V = Padding::Valid;
  std::vector<DwCase> cases = {
      {2, 5, 6, 3, 1, 1, 1},                                 // 1x1
      {1, 7, 7, 4, 1, 3, 3, 1, 1, 1, 1, S},                  // batch 1, 3x3 same
      {2, 8, 8, 5, 1, 3, 3, 2, 2, 1, 1, S},                  // 3x3 stride 2 same on even: padding after only
      {2, 9, 9, 5, 1, 3, 3, 2, 2, 1, 1, S},                  // 3x3 stride 2 same on odd: symmetric
      {2, 9, 8, 3, 1, 5, 5, 2, 2, 1, 1, S},                  // 5x5 stride 2 same
      {2, 11, 10, 3, 1, 5, 5, 1, 1, 1, 1, V},                // 5x5 valid
      {2, 7, 9, 3, 2, 3, 3, 1, 1, 1, 1, S},                  // multiplier 2
      {2, 8, 7, 3, 2, 3, 3, 2, 2, 1, 1, S},                  // multiplier 2, stride 2, asymmetric same
      {2, 6, 6, 2, 3, 2, 2, 1, 1, 1, 1, S},                  // even kernel, multiplier 3
      {2, 7, 9, 5, 1, 4, 4, 2, 2, 1, 1, S},                  // even kernel, stride 2, same
      {2, 2, 3, 3, 1, 5, 5, 1, 1, 1, 1, S},                  // input smaller than the kernel, same
      {1, 1, 1, 3, 2, 3, 3, 1, 1, 1, 1, S},                  // 1x1 input, 3x3 same
      {2, 4, 4, 3, 1, 3, 3, 3, 3, 1, 1, S},                  // stride 3 same on 4 -> 2
      {2, 9, 10, 3, 1, 3, 3, 1, 1, 2, 2, S},                 // dilation 2 same
      {2, 11, 9, 2, 2, 3, 3, 1, 1, 2, 1, V},                 // dilation 2x1 valid, multiplier 2
      {2, 7, 8, 3, 1, 1, 3, 1, 1, 1, 1, S},                  // 1x3
      {2, 9, 11, 4, 1, 3, 5, 1, 2, 1, 1, S},                 // 3x5, stride 1x2
      {2, 10, 11, 3, 1, 2, 3, 2, 3, 1, 1, V},                // 2x3, stride 2x3 valid
      {3, 6, 6, 5, 1, 3, 3, 1, 1, 1, 1, S, false},           // no bias
      {3, 6, 7, 4, 2, 3, 3, 2, 2, 1, 1, S, false},           // no bias, multiplier 2
      {2, 6, 6, 5, 1, 3, 3, 2, 2, 1, 1, V, true, false},     // no dx
      {2, 6, 6, 3, 2, 3, 3, 1, 1, 1, 1, S, false, false},    // no bias, no dx, multiplier 2
      {2, 3, 3, 2, 1, 3, 3, 1, 1, 1, 1, V},                  // input equals kernel: 1x1 output
      {1, 5, 5, 1, 1, 3, 3, 1, 1, 1, 1, S},                  // one channel
      {1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, V, false},           // 1x1, one channel, no bias: one filter partial
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(111);
    for (const auto& c : cases) check_case(be, c, rng);
  }
}

TEST_CASE("depthwise_conv2d forward and backward match float64 reference on random shapes", "[backends]") {
  const int ks[] = {1, 3, 5, 2, 7};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(222);
    int done = 0;
    while (done < 40) {
      int k = ks[uniform_int(rng, 0, 4)];
      DwCase c{uniform_int(rng, 1, 3), uniform_int(rng, 1, 13), uniform_int(rng, 1, 13), uniform_int(rng, 1, 37),
               int(uniform_int(rng, 1, 2)), k, uniform_int(rng, 0, 3) == 0 ? ks[uniform_int(rng, 0, 4)] : k};
      c.sh = int(uniform_int(rng, 1, 2));
      c.sw = uniform_int(rng, 0, 3) == 0 ? int(uniform_int(rng, 1, 3)) : c.sh;
      if (c.sh == 1 && c.sw == 1 && uniform_int(rng, 0, 5) == 0) c.dh = c.dw = 2;
      c.pad = uniform_int(rng, 0, 1) ? Padding::Same : Padding::Valid;
      c.bias = uniform_int(rng, 0, 3) != 0;
      c.want_dx = uniform_int(rng, 0, 5) != 0;
      ConvGeometry g = depthwise_conv2d_geometry({c.n, c.h, c.w, c.c}, params_of(c));
      if (g.oh == 0 || g.ow == 0) continue;  // the window does not fit: the layer rejects it
      check_case(be, c, rng);
      ++done;
    }
  }
}

TEST_CASE("depthwise_conv2d matches float64 reference on MobileNetV2-sized layers", "[backends]") {
  // MobileNetV2's depthwise layers (3x3, stride 1 or 2 after ZeroPadding2D + 'valid', or 'same'),
  // with smaller spatial sizes; channel counts large enough for oneDNN's JIT implementations.
  const Padding S = Padding::Same, V = Padding::Valid;
  std::vector<DwCase> cases = {
      {2, 12, 12, 32, 1, 3, 3, 1, 1, 1, 1, S, false},
      {2, 13, 13, 96, 1, 3, 3, 2, 2, 1, 1, V, false},  // after zero_pad2d ((0,1),(0,1)) of 12x12
      {2, 12, 12, 96, 1, 3, 3, 2, 2, 1, 1, S, false},  // the same as 'same' padding
      {2, 7, 7, 144, 1, 3, 3, 1, 1, 1, 1, S, false},
      {2, 5, 5, 576, 1, 3, 3, 1, 1, 1, 1, S, false},
      {2, 4, 4, 960, 1, 3, 3, 1, 1, 1, 1, S, true},
      {3, 9, 9, 48, 2, 3, 3, 2, 2, 1, 1, S, true},
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(333);
    for (const auto& c : cases) check_case(be, c, rng);
  }
}

TEST_CASE("depthwise_conv2d kernel serves changing batch sizes from its shape cache", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(444);
    DwCase c{4, 8, 8, 24, 1, 3, 3, 2, 2, 1, 1, Padding::Same};
    auto kernel = make_kernel<DepthwiseConv2dKernel>(be.ctx(), params_of(c));
    for (int64_t n : {4, 1, 3, 4, 1}) {
      c.n = n;
      check_case(be, c, rng, kernel.get());
    }
    c.h = 5;  // a new spatial size as well
    check_case(be, c, rng, kernel.get());
  }
}

TEST_CASE("depthwise_conv2d handles an empty batch and rejects mismatched shapes", "[backends]") {
  DepthwiseConv2dParams p;
  p.multiplier = 2, p.kh = 3, p.kw = 3, p.padding = Padding::Same;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(555);
    auto k = make_kernel<DepthwiseConv2dKernel>(be.ctx(), p);
    Tensor w = be.upload(random_tensor({3, 3, 2, 2}, rng)), b = be.upload(random_tensor({4}, rng));
    Tensor x0 = be.empty({0, 5, 5, 2}), y0 = be.empty({0, 5, 5, 4});
    REQUIRE_NOTHROW(k->forward(x0, w, b, y0));
    Tensor dw = be.upload(random_tensor(w.shape(), rng)), db = be.upload(random_tensor({4}, rng));
    Tensor dx0 = be.empty(x0.shape());
    REQUIRE_NOTHROW(k->backward(x0, w, y0, dx0, dw, db));
    be.check("dw of an empty batch", dw, ref::Vec(size_t(dw.numel()), 0.0), 0.0);
    be.check("db of an empty batch", db, ref::Vec(4, 0.0), 0.0);
    Tensor none;
    dw = be.upload(random_tensor(w.shape(), rng));
    REQUIRE_NOTHROW(k->backward(x0, w, y0, none, dw, db));
    be.check("dw of an empty batch without dx", dw, ref::Vec(size_t(dw.numel()), 0.0), 0.0);

    Tensor x = be.upload(random_tensor({1, 5, 5, 2}, rng)), y = be.empty({1, 5, 5, 4});
    Tensor bad_w = be.upload(random_tensor({3, 3, 2, 1}, rng));  // multiplier 1
    CHECK_THROWS_AS(k->forward(x, bad_w, b, y), std::invalid_argument);
    Tensor bad_w2 = be.upload(random_tensor({3, 3, 3, 2}, rng));  // 3 channels
    CHECK_THROWS_AS(k->forward(x, bad_w2, b, y), std::invalid_argument);
    Tensor bad_y = be.empty({1, 5, 5, 2});
    CHECK_THROWS_AS(k->forward(x, w, b, bad_y), std::invalid_argument);
    Tensor bad_b = be.upload(random_tensor({2}, rng));
    CHECK_THROWS_AS(k->forward(x, w, bad_b, y), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(x, w, Tensor(), y), std::invalid_argument);
    Tensor x3 = be.upload(random_tensor({5, 5, 2}, rng));
    CHECK_THROWS_AS(k->forward(x3, w, b, y), std::invalid_argument);
    Tensor bad_dx = be.empty({1, 5, 5, 4});
    CHECK_THROWS_AS(k->backward(x, w, y, bad_dx, dw, db), std::invalid_argument);
  }
}

TEST_CASE("depthwise_conv2d and its gradients are bit-identical from run to run", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(666);
    DepthwiseConv2dParams p;
    p.kh = 3, p.kw = 3, p.sh = 2, p.sw = 2, p.padding = Padding::Same;
    auto k = make_kernel<DepthwiseConv2dKernel>(be.ctx(), p);
    Tensor x = be.upload(random_tensor({8, 15, 16, 64}, rng)), w = be.upload(random_tensor({3, 3, 64, 1}, rng));
    Tensor b = be.upload(random_tensor({64}, rng)), dy = be.upload(random_tensor({8, 8, 8, 64}, rng));
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; ++r) {
      Tensor y = be.empty(dy.shape()), dx = be.empty(x.shape()), dw = be.empty(w.shape()), db = be.empty({64});
      k->forward(x, w, b, y);
      k->backward(x, w, dy, dx, dw, db);
      std::vector<float> all;
      for (Tensor* t : {&y, &dx, &dw, &db}) {
        Tensor h = be.download(*t);
        all.insert(all.end(), h.f32(), h.f32() + h.numel());
      }
      runs.push_back(std::move(all));
    }
    CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
  }
}
