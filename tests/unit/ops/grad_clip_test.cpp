// Gradient clipping's kernels and the moving average's: the sum of squares against float64 (and the same bits on every backend and thread count), clipping by value against its definition, train.ema's one pass against the element-wise passes.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backends.h"
#include "core/ops/math/grad_clip_math.h"
#include "core/ops/elementwise.h"
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

namespace {

// decide_step's memory: the scalars the host wrote, the check the kernels write.
struct Decided {
  StepScalars step;
  StepCheck check;
};

Decided decide(const Backend& be, OptimUpdateKernel& k, Tensor& g, const StepRule& r, float unscale) {
  Decided host;
  host.step.unscale = unscale;
  host.step.grad_scale = r.clip == StepRule::Value ? 1.0f : unscale;  // as StepUpdate::fill
  host.check.finite = -1;
  Tensor mem = be.empty(Shape{int64_t(sizeof(Decided))}, DType::U8);
  be.ctx().copy_from_host(mem.data(), &host, sizeof host);
  auto* dev = static_cast<Decided*>(mem.data());
  k.decide_step(g, r, &dev->step, &dev->check);
  Decided out;
  be.ctx().copy_to_host(&out, mem.data(), sizeof out);
  return out;
}

}  // namespace

TEST_CASE("optim_update decide_step: the host's finite check, norm, clip factor and skip, bit for bit, on every backend", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    std::mt19937_64 rng(9);
    const float unscale = 1.0f / 1000.0f;  // a loss scale of 1000: 1/scale is not exact
    for (int64_t n : kSizes) {
      for (bool poisoned : {false, true}) {
        if (poisoned && n == 0) continue;
        Tensor g = random_tensor({n}, rng, -300.0, 300.0);
        if (poisoned) g.f32()[n / 2] = INFINITY;
        const double squares = n ? k->sum_squares(be.upload(g)) : 0.0;
        for (int clip : {int(StepRule::None), int(StepRule::Norm), int(StepRule::Value)})
          for (bool keras : {true, false})
            for (bool check_finite : {false, true}) {
              INFO("n " << n << (poisoned ? " with an inf" : "") << ", clip " << clip << (keras ? " keras" : " pytorch")
                        << (check_finite ? ", loss scaling" : ""));
              StepRule r;
              r.check_finite = check_finite;
              r.clip = clip;
              r.limit = clip == StepRule::Value ? 0.05 : 1.5;
              r.keras = keras;
              Tensor d = be.upload(g);
              const Decided got = decide(be, *k, d, r, unscale);
              CHECK(got.check.finite == (check_finite && poisoned ? 0 : 1));
              const bool skip = check_finite && poisoned;
              CHECK(got.step.skip == (skip ? 1u : 0u));
              if (clip != StepRule::None) CHECK(std::memcmp(&got.check.sum_squares, &squares, sizeof squares) == 0);
              // The host's factor (GradClip::begin's arithmetic) for the same sum: the same bits.
              const double norm = grad_clip_math::unscaled_norm(squares, unscale);
              const float want = clip == StepRule::Value ? 1.0f
                                 : clip == StepRule::Norm && !skip
                                     ? grad_clip_math::clipped_grad_scale(norm, unscale, r.limit, keras)
                                     : unscale;
              CHECK(std::memcmp(&got.step.grad_scale, &want, sizeof want) == 0);
              if (clip == StepRule::Norm && !poisoned && n > 1000) CHECK(want < unscale);  // it clipped
              // clip_value: unscaled and clipped in place, unless skipped.
              ref::Vec v(static_cast<size_t>(n));
              for (int64_t j = 0; j < n; ++j) {
                const float x = g.f32()[j];
                v[size_t(j)] = clip == StepRule::Value && !skip ? grad_clip_math::clip_value(x, unscale, 0.05f) : x;
              }
              if (!poisoned) be.check("gradients", d, v, 0.0);
            }
      }
    }
    Tensor g = be.zeros({4});
    StepRule bad;
    bad.clip = StepRule::Norm;
    CHECK_THROWS_AS(decide(be, *k, g, bad, 1.0f), std::invalid_argument);  // no limit
  }
}

TEST_CASE("optim_update measure_step and decide_parts: a model in parts decides as the host does over its parts (all "
          "finite, the sums of squares in part order), bit for bit, on every backend", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    std::mt19937_64 rng(12);
    const float unscale = 1.0f / 1000.0f;
    for (int poisoned = -1; poisoned < 3; ++poisoned)
      for (int clip : {int(StepRule::None), int(StepRule::Norm), int(StepRule::Value)})
        for (bool check_finite : {false, true}) {
          INFO("part " << poisoned << " poisoned, clip " << clip << (check_finite ? ", loss scaling" : ""));
          StepRule r;
          r.check_finite = check_finite;
          r.clip = clip;
          r.limit = clip == StepRule::Value ? 0.05 : 1.5;
          // Three parts (one empty), on the host and where the kernels run.
          std::vector<Tensor> parts = {random_tensor({3001}, rng, -300.0, 300.0), random_tensor({0}, rng, -1.0, 1.0),
                                       random_tensor({517}, rng, -300.0, 300.0)};
          if (poisoned >= 0 && parts[size_t(poisoned)].numel() > 0) parts[size_t(poisoned)].f32()[7] = NAN;
          const bool bad = poisoned >= 0 && parts[size_t(poisoned)].numel() > 0;
          double squares = 0;  // StepUpdate::apply's order
          for (const Tensor& t : parts) squares += t.numel() > 0 ? k->sum_squares(be.upload(t)) : 0.0;
          Tensor measures = be.empty(Shape{int64_t(3 * sizeof(StepCheck))}, DType::U8);
          auto* m = static_cast<StepCheck*>(measures.data());
          std::vector<Tensor> dev;
          for (size_t i = 0; i < parts.size(); ++i) {
            dev.push_back(be.upload(parts[i]));
            k->measure_step(dev[i], r, m + i);
          }
          Decided host;
          host.step.unscale = unscale;
          host.step.grad_scale = clip == StepRule::Value ? 1.0f : unscale;
          host.check.finite = -1;
          Tensor mem = be.empty(Shape{int64_t(sizeof(Decided))}, DType::U8);
          be.ctx().copy_from_host(mem.data(), &host, sizeof host);
          auto* d = static_cast<Decided*>(mem.data());
          k->decide_parts(dev[2], r, m, 3, &d->step, &d->check);
          Decided got;
          be.ctx().copy_to_host(&got, mem.data(), sizeof got);
          const bool skip = check_finite && bad;
          CHECK(got.check.finite == (check_finite && bad ? 0 : 1));
          CHECK(got.step.skip == (skip ? 1u : 0u));
          if (clip != StepRule::None) CHECK(std::memcmp(&got.check.sum_squares, &squares, sizeof squares) == 0);
          const float want = clip == StepRule::Value ? 1.0f
                             : clip == StepRule::Norm && !skip
                                 ? grad_clip_math::clipped_grad_scale(grad_clip_math::unscaled_norm(squares, unscale),
                                                                      unscale, r.limit, true)
                                 : unscale;
          CHECK(std::memcmp(&got.step.grad_scale, &want, sizeof want) == 0);
          // clip_value: the part given to decide_parts unscaled and clipped in place, unless skipped.
          ref::Vec v(size_t(parts[2].numel()));
          for (size_t j = 0; j < v.size(); ++j) {
            const float x = parts[2].f32()[j];
            v[j] = clip == StepRule::Value && !skip ? grad_clip_math::clip_value(x, unscale, 0.05f) : x;
          }
          if (poisoned != 2) be.check("the last part", dev[2], v, 0.0);
        }
  }
}

TEST_CASE("optim_update average: train.ema's one pass gives the element-wise passes' bits, on every backend and thread count, and a fixed step's flags gate it",
          "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    auto ew = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    std::mt19937_64 rng(10);
    for (const float decay : {0.999f, 0.9f, 0.5f, 0.0f, 1.0f})
      for (int64_t n : kSizes) {
        INFO("n = " << n << ", decay " << decay);
        const Tensor avg0 = random_tensor({n}, rng, -2.0, 2.0), w = random_tensor({n}, rng, -2.0, 2.0);
        const float rest = float(1.0 - double(decay));
        // The slow path (WeightAverage before the one pass): scale, scale a copy, accumulate.
        Tensor slow = be.upload(avg0), copy = be.upload(w);
        if (n > 0) {
          ew->scale(slow, decay);
          ew->scale(copy, rest);
          ew->accumulate(copy, slow);
        }
        const Tensor dw = be.upload(w);
        for (const int threads : {1, 2, 3, 4}) {
          if (!be.is_cpu() && threads > 1) break;
          INFO(threads << " threads");
          const int team = omp_get_max_threads();
          if (be.is_cpu()) omp_set_num_threads(threads);
          Tensor fast = be.upload(avg0);
          k->average(fast, dw, decay, nullptr);
          if (be.is_cpu()) omp_set_num_threads(team);
          const Tensor a = be.download(fast), b = be.download(slow);
          if (n > 0) CHECK(std::memcmp(a.data(), b.data(), size_t(n) * sizeof(float)) == 0);
          // And the definition, in float64, to the products' rounding.
          ref::Vec want(static_cast<size_t>(n));
          for (int64_t j = 0; j < n; ++j) want[size_t(j)] = double(decay) * avg0.f32()[j] + double(rest) * w.f32()[j];
          be.check("average", fast, want, 1e-6);
        }
      }
    // A fixed step's flags, read from the context's memory: skipped or not averaging leaves it as it was.
    const Tensor avg0 = random_tensor({1000}, rng), w = random_tensor({1000}, rng);
    for (const auto& [skip, average] : {std::pair{0u, 1u}, std::pair{1u, 1u}, std::pair{0u, 0u}}) {
      INFO("skip " << skip << ", average " << average);
      StepScalars host;
      host.skip = skip;
      host.average = average;
      Tensor mem = be.empty(Shape{int64_t(sizeof host)}, DType::U8);
      be.ctx().copy_from_host(mem.data(), &host, sizeof host);
      Tensor a = be.upload(avg0), plain = be.upload(avg0);
      k->average(a, be.upload(w), 0.9f, static_cast<const StepScalars*>(mem.data()));
      k->average(plain, be.upload(w), 0.9f, nullptr);
      const Tensor got = be.download(a), moved = be.download(plain);
      const bool moves = skip == 0 && average == 1;
      CHECK(std::memcmp(got.data(), (moves ? moved : avg0).data(), 1000 * sizeof(float)) == 0);
    }
    Tensor a = be.zeros({4}), w4 = be.zeros({5});
    CHECK_THROWS_AS(k->average(a, w4, 0.9f, nullptr), std::invalid_argument);
    Tensor w3 = be.zeros({4});
    CHECK_THROWS_AS(k->average(a, w3, 1.5f, nullptr), std::invalid_argument);
  }
}
