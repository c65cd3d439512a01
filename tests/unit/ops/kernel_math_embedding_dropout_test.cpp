// Kernel math: embedding.h's per-element rules (valid ids, gather, sort keys, the gradient's segment sums) and philox.h's dropout rules, against float64 and exact counts.
#include <algorithm>
#include <numeric>

#include "core/ops/embedding.h"
#include "core/ops/math/philox.h"
#include "kernel_math_util.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

TEST_CASE("kernel math: embedding ids, gather and the sorted segment sums match float64") {
  std::mt19937_64 rng(481);
  CHECK(embedding::valid_id(0.0f, 1));
  CHECK_FALSE(embedding::valid_id(1.0f, 1));
  CHECK_FALSE(embedding::valid_id(-0.5f, 4));
  CHECK_FALSE(embedding::valid_id(2.5f, 4));
  CHECK_FALSE(embedding::valid_id(NAN, 4));
  CHECK_FALSE(embedding::valid_id(INFINITY, 4));
  CHECK(embedding::valid_id(-0.0f, 4));
  CHECK(embedding::sort_key(2.5f, 7) == 7u);
  CHECK(embedding::gather_source(NAN, 7, 3, 1) == -1);
  for (int64_t P : {1, 5, 300})
    for (int64_t V : {1, 3, 50})
      for (int64_t D : {1, 4}) {
        INFO(P << " positions, vocabulary " << V << ", width " << D);
        ref::Vec ids(static_cast<size_t>(P));
        for (auto& v : ids) v = double(uniform_int(rng, 0, V - 1));
        const std::vector<float> idf = to_floats(ids);
        const std::vector<float> w = to_floats(random_floats(size_t(V * D), rng));
        const std::vector<float> dy = to_floats(random_floats(size_t(P * D), rng));
        // Forward: gather_kernel's element rule.
        ref::Vec y;
        for (int64_t i = 0; i < P * D; ++i) y.push_back(w[embedding::gather_source(idf[i / D], V, D, i % D)]);
        check_within("y", y, ref::embedding_forward(ids, to_doubles(w), D), 0.0);
        // Backward: keys_kernel, a stable sort (CUB's radix sort is stable), segment_sum_kernel.
        std::vector<uint32_t> keys(static_cast<size_t>(P));
        std::vector<int32_t> pos(static_cast<size_t>(P));
        for (int64_t q = 0; q < P; ++q) keys[q] = embedding::sort_key(idf[q], V), pos[q] = int32_t(q);
        std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
        std::vector<uint32_t> sorted(keys.size());
        for (size_t k = 0; k < pos.size(); ++k) sorted[k] = keys[size_t(pos[k])];
        ref::Vec dw(size_t(V * D), 0.0), once(size_t(V * D), 0.0);
        int64_t heads = 0;
        for (int64_t i = 0; i < P * D; ++i) {
          float sum;
          if (embedding::segment_sum(sorted.data(), pos.data(), HostLoad{dy.data()}, P, D, V, i / D, i % D, sum)) {
            dw[sorted[i / D] * D + i % D] = sum;
            once[sorted[i / D] * D + i % D] += 1;
            ++heads;
          }
        }
        // Each (occurring id, column) written exactly once, by its run's head.
        CHECK(std::all_of(once.begin(), once.end(), [](double c) { return c <= 1; }));
        const ref::Vec want = ref::embedding_backward(ids, to_doubles(dy), V, D);
        // A float sum over at most P positions: P·u of the sum of |dy| (at most P).
        check_within("dw", dw, want, double(P) * kU);
        int64_t used = 0;
        for (double c : once) used += c > 0;
        CHECK(heads == used);
      }
  // An invalid id sorts last (key V) and heads no run: its dy is skipped.
  const uint32_t keys[3] = {0, 2, 2};
  const int32_t pos[3] = {1, 0, 2};
  float sum = -1;
  CHECK(embedding::segment_sum(keys, pos, [](int64_t) { return 1.0f; }, 3, 1, 2, 0, 0, sum));
  CHECK(sum == 1.0f);
  CHECK_FALSE(embedding::segment_sum(keys, pos, [](int64_t) { return 1.0f; }, 3, 1, 2, 1, 0, sum));
}

// The keep rule compares the word's top 24 bits with ceil(rate·2^24): over all 2^24 values exactly
// the fraction 1 - rate (to 2^-24) is kept, and keeping is u >= rate for u = (word >> 8) / 2^24.
TEST_CASE("kernel math: dropout keep rule and scaling are exact") {
  for (float rate : {0.0f, 1e-7f, 0.1f, 0.3f, 0.5f, 0.999f}) {
    INFO("rate " << rate);
    const uint32_t thr = dropout_threshold(rate);
    int64_t kept = 0, wrong = 0, off_by_one = 0;
    for (uint32_t top = 0; top < (1u << 24); ++top) {
      const uint32_t word = (top << 8) | (top & 0xffu);
      const bool keep = dropout_keep(word, thr);
      kept += keep;
      wrong += keep != (double(top) / 16777216.0 >= double(rate));
      off_by_one += keep != ((word >> 8) > thr);  // a strict comparison: a wrong rule
    }
    CHECK(wrong == 0);
    CHECK(kept == (int64_t(1) << 24) - int64_t(std::ceil(double(rate) * 16777216.0)));
    CHECK(off_by_one == 1);
    const float scale = dropout_scale(rate);
    CHECK(std::fabs(double(scale) - 1.0 / (1.0 - double(rate))) <= kU / (1.0 - double(rate)));
    for (float x : {1.0f, -3.5f, 1e-30f}) {
      CHECK(dropout_apply(false, x, scale) == 0.0f);
      CHECK(std::fabs(dropout_apply(true, x, scale) - double(x) / (1.0 - double(rate))) <=
            2 * kU * std::fabs(double(x)) / (1.0 - double(rate)));
    }
  }
}
