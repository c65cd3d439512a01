// WeightAverage (train.ema) on every test device against a float64 reference: the formula, `every`, skipped steps, host copies.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/optim/weight_average.h"
#include "test_devices.h"

using namespace trainer;

TEST_CASE("weight average: avg = d*avg + (1-d)*w after every `every`-th optimizer step, from the starting weights", "[backends]") {
  for (const test::TestDevice& td : test::test_devices()) {
    SECTION(td.name) {
      auto ctx = make_context(td.device, ContextOptions{});
      const int64_t n = 37;  // odd: no vector width divides it
      Tensor w = ctx->zeros(Shape{n});
      std::vector<double> host(n), avg(n);
      auto set_weights = [&](int step) {
        std::vector<float> v(n);
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(std::sin(0.3 * double(i) + step) * (1 + i));
        ctx->copy_from_host(w.data(), v.data(), size_t(n) * sizeof(float));
        for (int64_t i = 0; i < n; ++i) host[size_t(i)] = v[size_t(i)];
      };
      WeightAverageOptions o;
      o.decay = 0.9;
      o.every = 2;
      WeightAverage a(*ctx, w, o);
      set_weights(0);
      a.start();
      avg = host;
      const double d = double(float(0.9)), e = double(float(1.0 - double(float(0.9))));
      for (int step = 1; step <= 6; ++step) {
        set_weights(step);
        a.update(step);
        if (step % 2 == 0)
          for (int64_t i = 0; i < n; ++i) avg[size_t(i)] = d * avg[size_t(i)] + e * host[size_t(i)];
        a.update(step);  // the same count again (a skipped step): no update
        std::vector<float> got = a.download();
        REQUIRE(got.size() == size_t(n));
        for (int64_t i = 0; i < n; ++i) {
          INFO("step " << step << " element " << i);
          CHECK(std::abs(got[size_t(i)] - avg[size_t(i)]) <= 4e-7 * (1 + std::abs(avg[size_t(i)])));
        }
      }
      // Uploading replaces it (a resumed checkpoint's average).
      std::vector<float> back(n, 0.5f);
      a.upload(back);
      CHECK(a.download() == back);
    }
  }
}
