// multiply tests: y = a·b with b broadcast over a's positions, da and db, exactly the float64 values rounded once (f32, bf16, f16) on every backend; in place; shapes from empty to odd.
#include "core/ops/multiply.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

// Every product of two values of the type is exact in double (and in f32 for bf16 and f16), so y
// and da are the exact products rounded once to the type; db is the same double sum in the same
// order (each product exact, so a fused multiply-add changes nothing), rounded to float, then to
// the type: bit for bit on every backend.
void check_multiply(OpContext& ctx, DType t, std::mt19937_64& rng) {
  auto k = make_kernel<MultiplyKernel>(ctx, {});
  struct Dims {
    int64_t N, P, C;
  };
  for (Dims d : {Dims{1, 1, 1}, Dims{2, 1, 7}, Dims{3, 49, 16}, Dims{5, 9, 33}, Dims{1, 300, 3}, Dims{0, 4, 4},
                 Dims{2, 0, 5}}) {
    INFO(dtype_name(t) << " [" << d.N << ", " << d.P << ", " << d.C << "]");
    const Shape sa{d.N, d.P, d.C}, sb{d.N, d.C};
    const ref::Vec a = random_values(sa, rng, t, -4.0, 4.0), b = random_values(sb, rng, t, -2.0, 2.0),
                   dy = random_values(sa, rng, t);
    ref::Vec y(a.size()), da(a.size()), db(b.size());
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t c = 0; c < d.C; ++c) {
        double s = 0;
        for (int64_t p = 0; p < d.P; ++p) {
          const size_t i = size_t((n * d.P + p) * d.C + c);
          y[i] = round_to(t, a[i] * b[size_t(n * d.C + c)]);
          da[i] = round_to(t, dy[i] * b[size_t(n * d.C + c)]);
          s += dy[i] * a[i];
        }
        db[size_t(n * d.C + c)] = round_to(t, double(float(s)));
      }
    const Tensor ta = to_device(ctx, make(sa, t, a)), tb = to_device(ctx, make(sb, t, b)),
                 tdy = to_device(ctx, make(sa, t, dy));
    Tensor ty = to_device(ctx, nan_of(sa, t)), tda = to_device(ctx, nan_of(sa, t)), tdb = to_device(ctx, nan_of(sb, t));
    k->forward(ta, tb, ty);
    CHECK(values(to_host(ctx, ty)) == y);
    k->backward(ta, tb, tdy, tda, tdb);
    CHECK(values(to_host(ctx, tda)) == da);
    CHECK(values(to_host(ctx, tdb)) == db);
    // In place, as a graph may run it: y over a, da over dy; and either gradient alone.
    Tensor ia = to_device(ctx, make(sa, t, a)), idy = to_device(ctx, make(sa, t, dy)), none;
    k->forward(ia, tb, ia);
    CHECK(values(to_host(ctx, ia)) == y);
    Tensor db2 = to_device(ctx, nan_of(sb, t));
    k->backward(ta, tb, idy, idy, db2);
    CHECK(values(to_host(ctx, idy)) == da);
    CHECK(values(to_host(ctx, db2)) == db);
    Tensor db3 = to_device(ctx, nan_of(sb, t));
    k->backward(ta, tb, tdy, none, db3);
    CHECK(values(to_host(ctx, db3)) == db);
  }
  // Shapes and types that do not fit are refused, naming the tensor.
  const Tensor a = to_device(ctx, make({2, 3, 4}, t, ref::Vec(24, 1.0))), b = to_device(ctx, make({2, 3}, t, ref::Vec(6, 1.0)));
  Tensor y = to_device(ctx, nan_of({2, 3, 4}, t));
  CHECK_THROWS_WITH(k->forward(a, b, y), Catch::Contains("multiply") && Catch::Contains("b"));
}

}  // namespace

TEST_CASE("multiply forward, da and db are the float64 values rounded once, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(71);
    check_multiply(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("multiply forward, da and db are the float64 values rounded once, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(72);
    check_multiply(lo.ctx(), lo.type, rng);
  }
}
