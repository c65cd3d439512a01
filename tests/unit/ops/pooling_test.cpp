// pool2d and global_pool tests: max/avg forward/backward against float64 references, padding corners, micro-batches.
#include "core/ops/pooling.h"

#include <sstream>

#include "backends.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct PoolCase {
  int64_t n, h, w, c;
  int kh, kw, sh, sw;
  Padding pad;
};

ref::PoolDims dims_of(const PoolCase& k) {
  Window1d h = window_1d(k.h, k.kh, k.sh, 1, k.pad), w = window_1d(k.w, k.kw, k.sw, 1, k.pad);
  return {k.n, k.h, k.w, k.c, h.out, w.out, k.kh, k.kw, k.sh, k.sw, h.pad_before, w.pad_before};
}

Pool2dParams params_of(const PoolCase& k, PoolKind kind) {
  Pool2dParams p;
  p.kind = kind;
  p.kh = k.kh, p.kw = k.kw, p.sh = k.sh, p.sw = k.sw, p.padding = k.pad;
  return p;
}

void check_case(const Backend& be, const PoolCase& k, PoolKind kind, std::mt19937_64& rng) {
  bool max = kind == PoolKind::Max;
  INFO((max ? "max" : "avg") << " pool " << k.kh << "x" << k.kw << "/" << k.sh << "x" << k.sw << " "
                             << padding_name(k.pad) << " on " << k.n << "x" << k.h << "x" << k.w << "x" << k.c);
  auto kernel = make_kernel<Pool2dKernel>(be.ctx(), params_of(k, kind));
  ref::PoolDims d = dims_of(k);
  REQUIRE(d.oh > 0);
  REQUIRE(d.ow > 0);
  Tensor hx = random_tensor({k.n, k.h, k.w, k.c}, rng), x = be.upload(hx);
  Tensor y = be.nan({k.n, d.oh, d.ow, k.c});
  kernel->forward(x, y, true);
  ref::Vec xv = to_vec(hx);
  be.check("y", y, ref::pool2d_forward(d, xv, max));
  Tensor hdy = random_tensor(y.shape(), rng), dx = be.nan(x.shape());
  kernel->backward(x, y, be.upload(hdy), dx);
  be.check("dx", dx, ref::pool2d_backward(d, xv, to_vec(hdy), max));
  Tensor yi = be.nan(y.shape());
  kernel->forward(x, yi, false);  // inference gives the same values
  be.check("y (inference)", yi, ref::pool2d_forward(d, xv, max));
}

}  // namespace

TEST_CASE("pool2d max and avg match float64 reference on corner cases", "[backends]") {
  const Padding S = Padding::Same, V = Padding::Valid;
  std::vector<PoolCase> cases = {
      {2, 8, 8, 3, 2, 2, 2, 2, V},                                 // Keras default
      {2, 9, 7, 5, 2, 2, 2, 2, V},                                 // odd sizes drop the last row/column
      {2, 9, 7, 5, 2, 2, 2, 2, S},                                 // odd sizes, same: padding after
      {2, 32, 32, 4, 3, 3, 2, 2, V},                               // MiniGoogLeNet's 3/2
      {1, 15, 15, 7, 3, 3, 2, 2, S}, {2, 6, 7, 3, 3, 3, 1, 1, S},  // stride 1 same: padding both sides
      {2, 10, 11, 2, 3, 2, 3, 2, S},                               // non-square pool and strides
      {2, 2, 3, 3, 5, 5, 1, 1, S},                                 // input smaller than the pool, same
      {3, 7, 7, 16, 7, 7, 1, 1, V},                                // whole-image window
      {2, 5, 5, 33, 1, 1, 2, 2, V},                                // 1x1 subsampling
      {1, 2, 2, 1, 2, 2, 2, 2, V},                                 // one output element (a kept buffer of one)
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(21);
    for (const auto& c : cases) {
      check_case(be, c, PoolKind::Max, rng);
      check_case(be, c, PoolKind::Avg, rng);
    }
  }
}

TEST_CASE("pool2d max and avg match float64 reference on random shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(22);
    int done = 0;
    while (done < 30) {
      PoolCase c{uniform_int(rng, 1, 3),
                 uniform_int(rng, 1, 11),
                 uniform_int(rng, 1, 11),
                 uniform_int(rng, 1, 20),
                 int(uniform_int(rng, 1, 4)),
                 int(uniform_int(rng, 1, 4)),
                 int(uniform_int(rng, 1, 3)),
                 int(uniform_int(rng, 1, 3)),
                 uniform_int(rng, 0, 1) ? Padding::Same : Padding::Valid};
      ref::PoolDims d = dims_of(c);
      if (d.oh == 0 || d.ow == 0) continue;
      check_case(be, c, PoolKind::Max, rng);
      check_case(be, c, PoolKind::Avg, rng);
      ++done;
    }
  }
}

TEST_CASE("pool2d max backward pairs each input with its own forward (micro-batches, batch changes)", "[backends]") {
  PoolCase c{2, 9, 9, 6, 3, 3, 2, 2, Padding::Valid};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(23);
    auto kernel = make_kernel<Pool2dKernel>(be.ctx(), params_of(c, PoolKind::Max));
    ref::PoolDims d = dims_of(c);
    // Three forwards (one of another batch size) before their backwards, in reverse order.
    std::vector<Tensor> hxs = {random_tensor({2, 9, 9, 6}, rng), random_tensor({2, 9, 9, 6}, rng),
                               random_tensor({1, 9, 9, 6}, rng)};
    std::vector<Tensor> xs, ys;
    for (auto& hx : hxs) {
      xs.push_back(be.upload(hx));
      ys.push_back(be.empty({hx.dim(0), d.oh, d.ow, 6}));
      kernel->forward(xs.back(), ys.back(), true);
    }
    for (int i = 2; i >= 0; --i) {
      d.n = xs[i].dim(0);
      Tensor hdy = random_tensor(ys[i].shape(), rng), dx = be.nan(xs[i].shape());
      kernel->backward(xs[i], ys[i], be.upload(hdy), dx);
      be.check("dx of micro-batch " + std::to_string(i), dx,
               ref::pool2d_backward(d, to_vec(hxs[i]), to_vec(hdy), true));
    }
    // A backward without a training forward of that input recomputes the argmax.
    Tensor hx = random_tensor({2, 9, 9, 6}, rng), x = be.upload(hx), y = be.empty({2, d.oh, d.ow, 6});
    kernel->forward(x, y, false);
    d.n = 2;
    Tensor hdy = random_tensor(y.shape(), rng), dx = be.nan(x.shape());
    kernel->backward(x, y, be.upload(hdy), dx);
    be.check("dx after an inference forward", dx, ref::pool2d_backward(d, to_vec(hx), to_vec(hdy), true));
  }
}

TEST_CASE("pool2d max: ties send the gradient to the first maximum in row-major window order", "[backends]") {
  // Values from {0, 1, 2}: most windows hold their maximum more than once.
  const std::vector<PoolCase> cases = {{2, 9, 9, 5, 3, 3, 2, 2, Padding::Valid}, {2, 7, 6, 3, 3, 3, 1, 1, Padding::Same},
                                       {1, 8, 8, 17, 2, 2, 2, 2, Padding::Valid}};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(31);
    for (const PoolCase& k : cases) {
      INFO("max pool " << k.kh << "x" << k.kw << "/" << k.sh << " on " << k.n << "x" << k.h << "x" << k.w << "x" << k.c);
      auto kernel = make_kernel<Pool2dKernel>(be.ctx(), params_of(k, PoolKind::Max));
      const ref::PoolDims d = dims_of(k);
      Tensor hx = Tensor::empty({k.n, k.h, k.w, k.c});
      for (int64_t i = 0; i < hx.numel(); ++i) hx.f32()[i] = float(uniform_int(rng, 0, 2));
      Tensor x = be.upload(hx), y = be.nan({k.n, d.oh, d.ow, k.c});
      kernel->forward(x, y, true);
      Tensor hdy = random_tensor(y.shape(), rng), dx = be.nan(x.shape());
      kernel->backward(x, y, be.upload(hdy), dx);
      be.check("dx", dx, ref::pool2d_backward(d, to_vec(hx), to_vec(hdy), true));  // a wrong tap is off by a whole dy
    }
  }
}

TEST_CASE("pool2d handles an empty batch and rejects mismatched shapes", "[backends]") {
  PoolCase c{0, 6, 6, 3, 2, 2, 2, 2, Padding::Valid};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(24);
    auto kernel = make_kernel<Pool2dKernel>(be.ctx(), params_of(c, PoolKind::Max));
    Tensor x0 = be.empty({0, 6, 6, 3}), y0 = be.empty({0, 3, 3, 3});
    REQUIRE_NOTHROW(kernel->forward(x0, y0, true));
    REQUIRE_NOTHROW(kernel->backward(x0, y0, y0, x0));
    Tensor x = be.upload(random_tensor({1, 6, 6, 3}, rng)), bad = be.empty({1, 2, 3, 3});
    CHECK_THROWS_AS(kernel->forward(x, bad, true), std::invalid_argument);
  }
}

TEST_CASE("global_pool avg and max match float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(25);
    for (PoolKind kind : {PoolKind::Avg, PoolKind::Max}) {
      bool max = kind == PoolKind::Max;
      auto k = make_kernel<GlobalPoolKernel>(be.ctx(), GlobalPoolParams{kind});
      for (Shape s : {Shape{2, 7, 7, 336}, Shape{1, 1, 1, 5}, Shape{3, 5, 4, 17}, Shape{64, 8, 8, 10}}) {
        INFO((max ? "max" : "avg") << " over [" << s.str() << "]");
        int64_t hw = s[1] * s[2];
        Tensor hx = random_tensor(s, rng), x = be.upload(hx), y = be.nan({s[0], s[3]});
        k->forward(x, y);
        be.check("y", y, ref::global_pool_forward(to_vec(hx), s[0], hw, s[3], max));
        Tensor hdy = random_tensor(y.shape(), rng), dx = be.nan(s);
        k->backward(x, y, be.upload(hdy), dx);
        be.check("dx", dx, ref::global_pool_backward(to_vec(hx), to_vec(hdy), s[0], hw, s[3], max));
      }
      Tensor x0 = be.empty({0, 3, 3, 4}), y0 = be.empty({0, 4});
      REQUIRE_NOTHROW(k->forward(x0, y0));
      REQUIRE_NOTHROW(k->backward(x0, y0, y0, x0));
      Tensor x = be.upload(random_tensor({2, 3, 3, 4}, rng)), bad = be.empty({2, 5});
      CHECK_THROWS_AS(k->forward(x, bad), std::invalid_argument);
    }
  }
}

TEST_CASE("pool2d max: a window holding a NaN gives NaN (PyTorch's max_pool2d), training and inference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(11);
    for (const PoolCase& k : {PoolCase{2, 7, 9, 5, 2, 2, 2, 2, Padding::Valid}, PoolCase{1, 6, 6, 3, 3, 3, 1, 1, Padding::Same},
                              PoolCase{3, 8, 5, 17, 3, 2, 2, 1, Padding::Same}}) {
      auto kernel = make_kernel<Pool2dKernel>(be.ctx(), params_of(k, PoolKind::Max));
      const ref::PoolDims d = dims_of(k);
      Tensor hx = random_tensor({k.n, k.h, k.w, k.c}, rng);
      std::uniform_int_distribution<int64_t> at(0, hx.numel() - 1);
      for (int j = 0; j < 3; ++j) hx.f32()[at(rng)] = NAN;
      const ref::Vec want = ref::pool2d_forward(d, to_vec(hx), true);  // NaN where a window holds one
      for (bool training : {true, false}) {
        INFO((training ? "training" : "inference") << " " << k.kh << "x" << k.kw << "/" << k.sh << "x" << k.sw << " on "
                                                    << k.n << "x" << k.h << "x" << k.w << "x" << k.c);
        Tensor y = be.nan({k.n, d.oh, d.ow, k.c});
        Tensor x = be.upload(hx);
        kernel->forward(x, y, training);
        const auto [nans, wrong] = ref::match_with_nans(be.vec(y), want);
        CHECK(nans > 0);
        CHECK(wrong == 0);
      }
    }
  }
}
