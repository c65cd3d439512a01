// bias_add tests: y += b over the last axis (one rounding in low precision) and db as the column sums of dy within one f32 rounding of float64, on every backend; empty, one-channel and odd shapes; the same bits at 1-4 CPU threads.
#include "core/ops/bias.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

const std::vector<Shape> kShapes = {{0, 5}, {1, 1}, {3, 7, 33}, {1000, 3}, {2, 5, 4, 16}, {7}, {4, 0}};

void check_bias(OpContext& ctx, DType t, std::mt19937_64& rng) {
  auto k = make_kernel<BiasKernel>(ctx, BiasParams{});
  for (const Shape& s : kShapes) {
    INFO(dtype_name(t) << " [" << s.str() << "]");
    const int64_t C = s.dims().back(), rows = C ? s.numel() / C : 0;
    const ref::Vec y0 = random_values(s, rng, t), dy = random_values(s, rng, t), b = random_values({C}, rng, DType::F32);
    ref::Vec y(y0.size()), db(size_t(C), 0.0), mag(size_t(C), 0.0);
    for (size_t i = 0; i < y0.size(); ++i) y[i] = round_to(t, double(float(y0[i]) + float(b[i % size_t(C)])));
    for (size_t i = 0; i < dy.size(); ++i) db[i % size_t(C)] += dy[i], mag[i % size_t(C)] += std::fabs(dy[i]);
    Tensor ty = to_device(ctx, make(s, t, y0)), tdy = to_device(ctx, make(s, t, dy));
    Tensor tb = to_device(ctx, make({C}, DType::F32, b)), tdb = to_device(ctx, nan_of({C}, DType::F32));
    k->forward(ty, tb);
    CHECK(values(to_host(ctx, ty)) == y);  // the f32 sum rounded once: exact
    k->backward(tdy, tdb);
    const ref::Vec got = values(to_host(ctx, tdb));
    for (int64_t c = 0; c < C; ++c) {  // summed in double, rounded once to f32
      INFO("column " << c << " of " << rows << " rows");
      CHECK(std::fabs(got[size_t(c)] - db[size_t(c)]) <= 0x1p-24 * std::fabs(db[size_t(c)]) + 1e-12 * mag[size_t(c)]);
    }
  }
  // Shapes that disagree are refused, naming the tensor.
  Tensor y = to_device(ctx, nan_of({2, 3}, t)), b4 = to_device(ctx, nan_of({4}, DType::F32));
  CHECK_THROWS_WITH(k->forward(y, b4), Catch::Contains("bias_add") && Catch::Contains("b"));
  Tensor b16 = to_device(ctx, nan_of({3}, DType::BF16));
  CHECK_THROWS_WITH(k->backward(y, b16), Catch::Contains("db"));
}

}  // namespace

TEST_CASE("bias_add adds a per-channel bias and sums its gradient over the rows, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(91);
    check_bias(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("bias_add adds a per-channel bias and sums its gradient over the rows, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(92);
    check_bias(lo.ctx(), lo.type, rng);
  }
}

TEST_CASE("bias_add's gradient is the same bits at 1, 2, 3 and 4 CPU threads") {
  std::mt19937_64 rng(93);
  const Shape s{4000, 37};
  const Tensor dy = make(s, DType::F32, random_values(s, rng, DType::F32));
  std::vector<float> first;
  for (int threads : {1, 2, 3, 4}) {
    auto ctx = make_context(Device::cpu(), ContextOptions{threads});
    auto k = make_kernel<BiasKernel>(*ctx, BiasParams{});
    Tensor db = Tensor::empty({37});
    k->backward(dy, db);
    std::vector<float> got(db.f32(), db.f32() + 37);
    if (first.empty()) first = got;
    INFO(threads << " threads");
    CHECK(got == first);
  }
}
