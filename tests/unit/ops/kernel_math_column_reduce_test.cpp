// Kernel math: column_reduce.h, the GPU column reducer's order (partition, rows per thread, lane trees, finish) and its host emulation; on a GPU, the kernels against the emulation bit for bit.
#include "core/ops/math/column_reduce.h"

#include <cstring>

#include "backends.h"
#include "core/ops/math/batchnorm_math.h"
#include "kernel_math_util.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_reduce_probe.h"
#endif

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

// Σ x over each column through the emulation (the bias gradients' terms), [C].
std::vector<double> emulate_sums(const std::vector<float>& x, int64_t m, int64_t C) {
  std::vector<double> out(static_cast<size_t>(C));
  colred::column_reduce_reference<1>(
      m, C, [&](int64_t r, int64_t c, double(&a)[1]) { colred::sum_term(x[r * C + c], a); }, out.data());
  return out;
}

// Batch norm's centred terms (Σd, Σd² of d = x - x[0, c]) through the emulation, [C][2].
std::vector<double> emulate_centred(const std::vector<float>& x, int64_t m, int64_t C) {
  std::vector<double> out(size_t(2 * C));
  colred::column_reduce_reference<2>(
      m, C, [&](int64_t r, int64_t c, double(&a)[2]) { bn::centred_terms(x[r * C + c], x[c], a); }, out.data());
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The longest chain of additions any element goes through: its thread's rows, the 8-lane tree, the
// finishing lane's parts, the 32-lane tree. Recursive summation of n terms errs by at most
// (n - 1)·u·Σ|x| (u = 2^-53 in double): the emulation's bound is depth·u·Σ|x|.
int64_t depth(int64_t m, int64_t C) {
  const colred::ColumnSplit s = colred::column_split(m, C);
  const int64_t rows = (s.rows_per_part + colred::kRowLanes - 1) / colred::kRowLanes;
  const int64_t parts = (s.parts + colred::kPartLanes - 1) / colred::kPartLanes;
  return rows + 3 + parts + 5;
}

}  // namespace

TEST_CASE("kernel math: column reduction partition covers every row and column exactly once, no empty part") {
  const int64_t ms[] = {0, 1, 2, 7, 8, 9, 255, 256, 257, 1000, 4097, 65536, 65537, 262144, 1000003, 25000000};
  const int64_t Cs[] = {0, 1, 5, 31, 32, 33, 96, 2048, 65537, 3000000};
  for (int64_t m : ms)
    for (int64_t C : Cs) {
      INFO("m " << m << ", C " << C);
      const colred::ColumnSplit s = colred::column_split(m, C);
      CHECK(s.tiles == (C + 31) / 32);
      if (m == 0 || C == 0) {
        CHECK(s.parts == 0);
        continue;
      }
      REQUIRE(s.parts >= 1);
      CHECK(s.parts <= colred::kMaxParts);
      CHECK(s.tiles * s.parts <= std::max(colred::kMaxBlocks, s.tiles));  // the partials grid
      CHECK((s.parts + colred::kPartLanes - 1) / colred::kPartLanes <= colred::kMaxParts / colred::kPartLanes);
      // Parts: contiguous, in order, each non-empty, ending at m.
      int64_t next = 0;
      bool ok = true;
      for (int64_t p = 0; p < s.parts; ++p) {
        const colred::RowRange r = colred::part_rows(s, p, m);
        ok = ok && r.begin == next && r.end > r.begin;
        next = r.end;
      }
      CHECK(ok);
      CHECK(next == m);
      // Within a part the 8 row lanes take every row once (counted where it is cheap).
      if (s.rows_per_part <= 4096) {
        const colred::RowRange r = colred::part_rows(s, s.parts - 1, m);
        std::vector<int> seen(size_t(r.end - r.begin));
        for (int l = 0; l < colred::kRowLanes; ++l)
          colred::for_lane_rows(r, l, [&](int64_t row) { ++seen[size_t(row - r.begin)]; });
        CHECK(std::count(seen.begin(), seen.end(), 1) == int64_t(seen.size()));
      }
      // The 32 part lanes of the finish take every part once.
      std::vector<int> parts(size_t(s.parts));
      for (int l = 0; l < colred::kPartLanes; ++l)
        colred::for_lane_parts(s.parts, l, [&](int64_t p) { ++parts[size_t(p)]; });
      CHECK(std::count(parts.begin(), parts.end(), 1) == s.parts);
      // Columns: tile t, lane l is column 32t + l while below C.
      int64_t cols = 0;
      for (int64_t t = 0; t < s.tiles && t < 4; ++t)
        for (int l = 0; l < colred::kTile; ++l) cols += colred::tile_column(t, l, C) == t * 32 + l;
      CHECK(cols == std::min<int64_t>(C, 4 * 32));
      CHECK(colred::tile_column(s.tiles - 1, colred::kTile - 1, C) == (C % 32 == 0 ? C - 1 : -1));
    }
}

TEST_CASE("kernel math: column reduction emulation equals a long double sum within its error bound") {
  std::mt19937_64 rng(421);
  const int64_t shapes[][2] = {{1, 1}, {7, 33}, {1000, 5}, {65536, 96}, {300001, 3}};
  for (const auto& sh : shapes) {
    const int64_t m = sh[0], C = sh[1];
    INFO("[" << m << ", " << C << "], depth " << depth(m, C));
    const std::vector<float> x = to_floats(random_floats(size_t(m * C), rng, 0.0, 2.0));
    const std::vector<double> got = emulate_sums(x, m, C);
    double worst = 0, worst_float = 0;
    for (int64_t c = 0; c < C; ++c) {
      long double exact = 0, abs_sum = 0;
      float fsum = 0;  // a wrong accumulator: float
      for (int64_t r = 0; r < m; ++r) {
        exact += x[r * C + c];
        abs_sum += std::fabs(x[r * C + c]);
        fsum += x[r * C + c];
      }
      const double bound = double(depth(m, C)) * 0x1p-53 * double(abs_sum);
      worst = std::max(worst, double(std::fabs(got[c] - exact)) / std::max(bound, 1e-300));
      worst_float = std::max(worst_float, double(std::fabs(fsum - exact)) / std::max(bound, 1e-300));
    }
    INFO("largest error / bound " << worst << "; a float accumulator's " << worst_float);
    CHECK(worst <= 1.0);
    if (m >= 1000) CHECK(worst_float > 1.0);
  }
  // No rows: zeros for every column.
  CHECK(same_bits(emulate_sums({}, 0, 5), std::vector<double>(5, 0.0)));
  CHECK(emulate_sums({}, 0, 0).empty());
}

// The order is a function of (m, C) alone: a column's bits do not depend on the other columns, on
// where the column sits, or on the run; different row orders (a mutated emulation) do change them.
TEST_CASE("kernel math: column reduction bits depend on nothing but (m, C) and the column's values") {
  std::mt19937_64 rng(422);
  for (const auto& sh : {std::pair<int64_t, int64_t>{65536, 96}, {7, 33}, {5000, 40}}) {
    const int64_t m = sh.first, C = sh.second;
    INFO("[" << m << ", " << C << "]");
    // Values of every magnitude from 2^-30 to 2^30, so that double sums round (sums of floats of
    // one magnitude are often exact in double, whatever the order).
    std::vector<float> x = to_floats(random_floats(size_t(m * C), rng, -1.0, 1.0));
    for (float& v : x) v = std::ldexp(v, int(uniform_int(rng, -30, 30)));
    const std::vector<double> a = emulate_sums(x, m, C), a2 = emulate_centred(x, m, C);
    CHECK(same_bits(a, emulate_sums(x, m, C)));
    CHECK(same_bits(a2, emulate_centred(x, m, C)));
    // Column 3's values moved to column C - 1, every other column redrawn.
    std::vector<float> y = to_floats(random_floats(size_t(m * C), rng, -5e6, 5e6));
    for (int64_t r = 0; r < m; ++r) y[r * C + (C - 1)] = x[r * C + 3];
    const std::vector<double> b = emulate_sums(y, m, C), b2 = emulate_centred(y, m, C);
    CHECK(std::memcmp(&a[3], &b[C - 1], sizeof(double)) == 0);
    CHECK(std::memcmp(&a2[6], &b2[2 * (C - 1)], 2 * sizeof(double)) == 0);
    // A different order (rows reversed) changes the bits of some column: the test can see order.
    if (m > 1000) {
      std::vector<float> rev(x.size());
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < C; ++c) rev[r * C + c] = x[(m - 1 - r) * C + c];
      CHECK(!same_bits(a, emulate_sums(rev, m, C)));
    }
  }
}

// On a GPU: the two kernels of cuda_reduce.cuh give exactly the emulation's bits (bias-gradient
// terms and batch norm's centred terms). Skipped (Missing::Gpu) where no GPU can run.
TEST_CASE("kernel math: column reduction kernels on the GPU are bit-identical to the host emulation") {
  const Backend* gpu = gpu_backend();
  if (!gpu) return;
#ifdef TRAINER_HAVE_CUDA
  std::mt19937_64 rng(423);
  const int64_t shapes[][2] = {{1, 1}, {0, 5}, {65536, 96}, {262144, 96}, {7, 33}, {300, 1}, {1, 2049}};
  for (const auto& sh : shapes) {
    const int64_t m = sh[0], C = sh[1];
    INFO("[" << m << ", " << C << "]");
    const std::vector<float> x = to_floats(random_floats(size_t(m * C), rng, 5.0, 9.0));
    CHECK(same_bits(cuda::column_reduce_on_gpu(gpu->ctx(), x, m, C, 1), emulate_sums(x, m, C)));
    CHECK(same_bits(cuda::column_reduce_on_gpu(gpu->ctx(), x, m, C, 2), emulate_centred(x, m, C)));
  }
#endif
}

