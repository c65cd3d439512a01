// permute tests: every permutation of a sample's 1, 2 and 3 axes against the index arithmetic written out by hand, forward and the inverse in backward, the elements' bits (f32, bf16, f16) on every backend; empty and one-element shapes; arguments refused.
#include "core/ops/permute.h"

#include <algorithm>

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

void check_permute(OpContext& ctx, DType t, std::mt19937_64& rng) {
  for (const Shape& s : {Shape{3, 5}, Shape{2, 4, 7}, Shape{2, 3, 5, 4}, Shape{1, 1, 1, 1}, Shape{0, 3, 2}, Shape{2, 6, 1, 3}}) {
    const int r = int(s.rank()) - 1;
    std::vector<int> dims(static_cast<size_t>(r));
    for (int k = 0; k < r; ++k) dims[size_t(k)] = k;
    do {
      INFO(dtype_name(t) << " x [" << s.str() << "], dims " << (r > 0 ? dims[0] : -1) << (r > 1 ? dims[1] : -1)
                         << (r > 2 ? dims[2] : -1));
      auto k = make_kernel<PermuteKernel>(ctx, PermuteParams{dims});
      // y[n, i_0, .., i_{r-1}] = x[n, j] with j[dims[k]] = i_k.
      std::vector<int64_t> od{s[0]};
      for (int d : dims) od.push_back(s[size_t(d + 1)]);
      const Shape os(od);
      const ref::Vec x = random_values(s, rng, t), dy = random_values(os, rng, t);
      ref::Vec y(x.size()), dx(x.size());
      for (int64_t e = 0; e < os.numel(); ++e) {
        int64_t rem = e, idx[4] = {};
        for (int a = r; a >= 0; --a) idx[a] = rem % os[size_t(a)], rem /= os[size_t(a)];
        int64_t src[4] = {idx[0]};
        for (int a = 0; a < r; ++a) src[dims[size_t(a)] + 1] = idx[a + 1];
        int64_t off = 0;
        for (int a = 0; a <= r; ++a) off = off * s[size_t(a)] + src[a];
        y[size_t(e)] = x[size_t(off)];
        dx[size_t(off)] = dy[size_t(e)];
      }
      const Tensor tx = to_device(ctx, make(s, t, x)), tdy = to_device(ctx, make(os, t, dy));
      Tensor ty = to_device(ctx, nan_of(os, t)), tdx = to_device(ctx, nan_of(s, t));
      k->forward(tx, ty);
      CHECK(values(to_host(ctx, ty)) == y);
      k->backward(tdy, tdx);
      CHECK(values(to_host(ctx, tdx)) == dx);
    } while (std::next_permutation(dims.begin(), dims.end()));
  }
}

}  // namespace

TEST_CASE("permute moves each element to its permuted place and back, every permutation, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(161);
    check_permute(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("permute moves each element to its permuted place and back, every permutation, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(162);
    check_permute(lo.ctx(), lo.type, rng);
  }
}

TEST_CASE("permute refuses a non-permutation, another rank and aliasing, naming them", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    OpContext& ctx = be.ctx();
    CHECK_THROWS_WITH(make_kernel<PermuteKernel>(ctx, PermuteParams{{0, 0}}), Catch::Contains("permutation"));
    CHECK_THROWS_WITH(make_kernel<PermuteKernel>(ctx, PermuteParams{{}}), Catch::Contains("permutation"));
    CHECK_THROWS_WITH(make_kernel<PermuteKernel>(ctx, PermuteParams{{0, 1, 2, 3}}), Catch::Contains("permutation"));
    auto k = make_kernel<PermuteKernel>(ctx, PermuteParams{{1, 0}});
    Tensor x = to_device(ctx, make({2, 3, 4}, DType::F32, ref::Vec(24, 1.0))), y = to_device(ctx, nan_of({2, 4, 3}, DType::F32));
    Tensor flat = to_device(ctx, make({2, 12}, DType::F32, ref::Vec(24, 1.0)));
    CHECK_THROWS_WITH(k->forward(flat, y), Catch::Contains("x must have rank 3"));
    Tensor wrong = to_device(ctx, nan_of({2, 3, 4}, DType::F32));
    CHECK_THROWS_WITH(k->forward(x, wrong), Catch::Contains("y"));
    auto same = make_kernel<PermuteKernel>(ctx, PermuteParams{{0, 1}});
    CHECK_THROWS_WITH(same->forward(x, x), Catch::Contains("y aliases x"));
  }
}
