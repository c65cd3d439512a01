// pool2d and global_pool tests: max/avg forward/backward against float64 references, padding corners, micro-batches.
#include "core/ops/pooling.h"

#include <sstream>

#include "test_util.h"

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

void check_case(const PoolCase& k, PoolKind kind, std::mt19937_64& rng) {
  bool max = kind == PoolKind::Max;
  INFO((max ? "max" : "avg") << " pool " << k.kh << "x" << k.kw << "/" << k.sh << "x" << k.sw << " "
                             << padding_name(k.pad) << " on " << k.n << "x" << k.h << "x" << k.w << "x" << k.c);
  auto kernel = make_kernel<Pool2dKernel>(cpu_ctx(), params_of(k, kind));
  ref::PoolDims d = dims_of(k);
  REQUIRE(d.oh > 0);
  REQUIRE(d.ow > 0);
  Tensor x = random_tensor({k.n, k.h, k.w, k.c}, rng);
  Tensor y = cpu_ctx().empty({k.n, d.oh, d.ow, k.c});
  poison(y);
  kernel->forward(x, y, true);
  ref::Vec xv = to_vec(x);
  check_close("y", y, ref::pool2d_forward(d, xv, max));
  Tensor dy = random_tensor(y.shape(), rng), dx = cpu_ctx().empty(x.shape());
  poison(dx);
  kernel->backward(x, y, dy, dx);
  check_close("dx", dx, ref::pool2d_backward(d, xv, to_vec(dy), max));
  Tensor yi = cpu_ctx().empty(y.shape());
  kernel->forward(x, yi, false);  // inference gives the same values
  check_close("y (inference)", yi, ref::pool2d_forward(d, xv, max));
}

}  // namespace

TEST_CASE("pool2d max and avg match float64 reference on corner cases") {
  std::mt19937_64 rng(21);
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
  };
  for (const auto& c : cases) {
    check_case(c, PoolKind::Max, rng);
    check_case(c, PoolKind::Avg, rng);
  }
}

TEST_CASE("pool2d max and avg match float64 reference on random shapes") {
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
    check_case(c, PoolKind::Max, rng);
    check_case(c, PoolKind::Avg, rng);
    ++done;
  }
}

TEST_CASE("pool2d max backward pairs each input with its own forward (micro-batches, batch changes)") {
  std::mt19937_64 rng(23);
  PoolCase c{2, 9, 9, 6, 3, 3, 2, 2, Padding::Valid};
  auto kernel = make_kernel<Pool2dKernel>(cpu_ctx(), params_of(c, PoolKind::Max));
  ref::PoolDims d = dims_of(c);
  // Three forwards (one of another batch size) before their backwards, in reverse order.
  std::vector<Tensor> xs = {random_tensor({2, 9, 9, 6}, rng), random_tensor({2, 9, 9, 6}, rng),
                            random_tensor({1, 9, 9, 6}, rng)};
  std::vector<Tensor> ys;
  for (auto& x : xs) {
    ys.push_back(cpu_ctx().empty({x.dim(0), d.oh, d.ow, 6}));
    kernel->forward(x, ys.back(), true);
  }
  for (int i = 2; i >= 0; --i) {
    d.n = xs[i].dim(0);
    Tensor dy = random_tensor(ys[i].shape(), rng), dx = cpu_ctx().empty(xs[i].shape());
    kernel->backward(xs[i], ys[i], dy, dx);
    check_close("dx of micro-batch " + std::to_string(i), dx, ref::pool2d_backward(d, to_vec(xs[i]), to_vec(dy), true));
  }
  // A backward without a training forward of that input recomputes the argmax.
  Tensor x = random_tensor({2, 9, 9, 6}, rng), y = cpu_ctx().empty({2, d.oh, d.ow, 6});
  kernel->forward(x, y, false);
  d.n = 2;
  Tensor dy = random_tensor(y.shape(), rng), dx = cpu_ctx().empty(x.shape());
  kernel->backward(x, y, dy, dx);
  check_close("dx after an inference forward", dx, ref::pool2d_backward(d, to_vec(x), to_vec(dy), true));
}

TEST_CASE("pool2d handles an empty batch and rejects mismatched shapes") {
  std::mt19937_64 rng(24);
  PoolCase c{0, 6, 6, 3, 2, 2, 2, 2, Padding::Valid};
  auto kernel = make_kernel<Pool2dKernel>(cpu_ctx(), params_of(c, PoolKind::Max));
  Tensor x0 = cpu_ctx().empty({0, 6, 6, 3}), y0 = cpu_ctx().empty({0, 3, 3, 3});
  REQUIRE_NOTHROW(kernel->forward(x0, y0, true));
  REQUIRE_NOTHROW(kernel->backward(x0, y0, y0, x0));
  Tensor x = random_tensor({1, 6, 6, 3}, rng), bad = cpu_ctx().empty({1, 2, 3, 3});
  CHECK_THROWS_AS(kernel->forward(x, bad, true), std::invalid_argument);
}

TEST_CASE("global_pool avg and max match float64 reference") {
  std::mt19937_64 rng(25);
  for (PoolKind kind : {PoolKind::Avg, PoolKind::Max}) {
    bool max = kind == PoolKind::Max;
    auto k = make_kernel<GlobalPoolKernel>(cpu_ctx(), GlobalPoolParams{kind});
    for (Shape s : {Shape{2, 7, 7, 336}, Shape{1, 1, 1, 5}, Shape{3, 5, 4, 17}, Shape{64, 8, 8, 10}}) {
      INFO((max ? "max" : "avg") << " over [" << s.str() << "]");
      int64_t hw = s[1] * s[2];
      Tensor x = random_tensor(s, rng), y = cpu_ctx().empty({s[0], s[3]});
      poison(y);
      k->forward(x, y);
      check_close("y", y, ref::global_pool_forward(to_vec(x), s[0], hw, s[3], max));
      Tensor dy = random_tensor(y.shape(), rng), dx = cpu_ctx().empty(s);
      poison(dx);
      k->backward(x, y, dy, dx);
      check_close("dx", dx, ref::global_pool_backward(to_vec(x), to_vec(dy), s[0], hw, s[3], max));
    }
    Tensor x0 = cpu_ctx().empty({0, 3, 3, 4}), y0 = cpu_ctx().empty({0, 4});
    REQUIRE_NOTHROW(k->forward(x0, y0));
    REQUIRE_NOTHROW(k->backward(x0, y0, y0, x0));
    Tensor x = random_tensor({2, 3, 3, 4}, rng), bad = cpu_ctx().empty({2, 5});
    CHECK_THROWS_AS(k->forward(x, bad), std::invalid_argument);
  }
}
