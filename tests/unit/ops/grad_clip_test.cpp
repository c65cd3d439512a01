// Gradient clipping's kernels: the sum of squares against float64 (and the same bits on every backend and thread count), and clipping by value against its definition.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backends.h"
#include "core/ops/math/grad_clip_math.h"
#include "core/ops/optim_update.h"

using namespace trainer;
using namespace trainer::test;

namespace {
// Empty, one element, less than a lane row, one chunk and one more, several chunks and odd.
constexpr int64_t kSizes[] = {0, 1, 255, grad_clip_math::kChunk, grad_clip_math::kChunk + 1, 100003};
}  // namespace

TEST_CASE("optim_update sum_squares matches float64, with the same bits on every backend and thread count", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    std::mt19937_64 rng(7);
    for (int64_t n : kSizes) {
      INFO("n = " << n);
      Tensor g = random_tensor({n}, rng, -3.0, 3.0);
      long double want = 0;
      for (int64_t j = 0; j < n; ++j) want += (long double)g.f32()[j] * g.f32()[j];
      const double got = k->sum_squares(be.upload(g));
      CHECK(std::abs(double(want) - got) <= 1e-13 * double(want));
      // The chunked order's value, computed here on the host: the backend's bits.
      double order = 0;
      for (int64_t c = 0; c < grad_clip_math::chunks(n); ++c) order += grad_clip_math::chunk_sum_squares(g.f32(), n, c);
      CHECK(std::memcmp(&got, &order, sizeof got) == 0);
      if (be.is_cpu()) {  // one thread gives the same bits as the team
        const int team = omp_get_max_threads();
        omp_set_num_threads(1);
        const double one = k->sum_squares(be.upload(g));
        omp_set_num_threads(team);
        CHECK(std::memcmp(&got, &one, sizeof got) == 0);
      }
    }
    // A non-finite element makes the sum non-finite (the norm then says so).
    Tensor bad = random_tensor({1000}, rng);
    bad.f32()[500] = NAN;
    CHECK(std::isnan(k->sum_squares(be.upload(bad))));
  }
}

TEST_CASE("optim_update clip_values unscales and clips every element to [-limit, limit]", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    std::mt19937_64 rng(8);
    for (int64_t n : kSizes) {
      INFO("n = " << n);
      Tensor g = random_tensor({n}, rng, -4.0, 4.0);
      Tensor d = be.upload(g);
      k->clip_values(d, 0.25f, 0.5f);
      ref::Vec want(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) want[size_t(j)] = std::min(0.5, std::max(-0.5, double(g.f32()[j] * 0.25f)));
      be.check("clipped", d, want, 0.0);
    }
    Tensor g = be.zeros({4});
    CHECK_THROWS_AS(k->clip_values(g, 1.0f, 0.0f), std::invalid_argument);
    Tensor wrong = be.zeros({4}, DType::I32);
    CHECK_THROWS_AS(k->sum_squares(wrong), std::invalid_argument);
  }
}
