// merge tests: Keras's Subtract, Average, Maximum and Minimum and their gradients, exactly the reference's f32 arithmetic rounded once (f32, bf16, f16) on every backend; ties and NaN; 2 to 64 inputs; empty and odd shapes; arguments refused.
#include "core/ops/merge.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

const char* mode_name(MergeMode m) {
  return m == MergeMode::Subtract ? "subtract" : m == MergeMode::Average ? "average" : m == MergeMode::Maximum ? "maximum" : "minimum";
}

// The reference, written from Keras's definitions rather than merge_math.h: Subtract x0 − x1,
// Average the f32 running sum then the division, Maximum (Minimum) the chain
// m = max(m, x_i) whose gradient (TensorFlow's: to the first operand where it is >= the second)
// ends at the earliest input holding the extreme. Every input value is exact in f32.
struct Ref {
  ref::Vec y;
  std::vector<ref::Vec> dx;
};
Ref reference(MergeMode m, const std::vector<ref::Vec>& xs, const ref::Vec& dy, DType t) {
  const size_t n = xs.size(), total = dy.size();
  Ref r{ref::Vec(total), std::vector<ref::Vec>(n, ref::Vec(total))};
  for (size_t e = 0; e < total; ++e) {
    float out = float(xs[0][e]);
    size_t win = 0;
    if (m == MergeMode::Subtract) out = float(xs[0][e]) - float(xs[1][e]);
    for (size_t i = 1; i < n && m != MergeMode::Subtract; ++i) {
      const float v = float(xs[i][e]);
      if (m == MergeMode::Average) out += v;
      else if (m == MergeMode::Maximum ? !(out >= v) : !(out <= v)) out = v, win = i;  // the first operand keeps ties
    }
    if (m == MergeMode::Average) out /= float(n);
    r.y[e] = round_to(t, double(out));
    const float g = float(dy[e]);
    for (size_t i = 0; i < n; ++i) {
      float d = 0.0f;
      if (m == MergeMode::Subtract) d = i == 0 ? g : -g;
      else if (m == MergeMode::Average) d = g / float(n);
      else d = i == win ? g : 0.0f;
      r.dx[i][e] = round_to(t, double(d));
    }
  }
  return r;
}

// Values drawn from a few levels so that equal values (ties) are common.
ref::Vec tied_values(const Shape& s, std::mt19937_64& rng, DType t) {
  ref::Vec v = random_values(s, rng, t, -3.0, 3.0);
  std::uniform_int_distribution<int> level(-3, 3), coin(0, 2);
  for (double& e : v)
    if (coin(rng) == 0) e = double(level(rng)) * 0.5;
  return v;
}

void check_merge(OpContext& ctx, DType t, MergeMode m, std::mt19937_64& rng) {
  auto k = make_kernel<MergeKernel>(ctx, MergeParams{m});
  const std::vector<int> counts = m == MergeMode::Subtract ? std::vector<int>{2} : std::vector<int>{2, 3, 7, 64};
  for (int n : counts)
    for (const Shape& s : {Shape{1, 1}, Shape{3, 5, 7}, Shape{2, 4, 4, 17}, Shape{0, 6}, Shape{5, 0}}) {
      INFO(mode_name(m) << " " << dtype_name(t) << " " << n << " inputs of [" << s.str() << "]");
      std::vector<ref::Vec> xs;
      std::vector<Tensor> tx;
      for (int i = 0; i < n; ++i) {
        xs.push_back(tied_values(s, rng, t));
        tx.push_back(to_device(ctx, make(s, t, xs.back())));
      }
      const ref::Vec dy = random_values(s, rng, t);
      const Ref want = reference(m, xs, dy, t);
      std::vector<const Tensor*> in;
      for (const Tensor& x : tx) in.push_back(&x);
      Tensor ty = to_device(ctx, nan_of(s, t)), tdy = to_device(ctx, make(s, t, dy));
      k->forward(in, ty);
      CHECK(values(to_host(ctx, ty)) == want.y);
      std::vector<Tensor> tdx;
      for (int i = 0; i < n; ++i) tdx.push_back(to_device(ctx, nan_of(s, t)));
      std::vector<Tensor*> out;
      for (Tensor& d : tdx) out.push_back(&d);
      k->backward(in, tdy, out);
      for (int i = 0; i < n; ++i) CHECK(values(to_host(ctx, tdx[size_t(i)])) == want.dx[size_t(i)]);
      // Only the last input's gradient wanted: the others are left as they were.
      Tensor none, last = to_device(ctx, nan_of(s, t));
      std::vector<Tensor*> some(size_t(n), &none);
      some.back() = &last;
      k->backward(in, tdy, some);
      CHECK(values(to_host(ctx, last)) == want.dx.back());
    }
}

}  // namespace

TEST_CASE("merge subtract, average, maximum and minimum are Keras's arithmetic rounded once, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(131);
    for (MergeMode m : {MergeMode::Subtract, MergeMode::Average, MergeMode::Maximum, MergeMode::Minimum})
      check_merge(be.ctx(), DType::F32, m, rng);
  }
}

TEST_CASE("merge subtract, average, maximum and minimum are Keras's arithmetic rounded once, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(132);
    for (MergeMode m : {MergeMode::Subtract, MergeMode::Average, MergeMode::Maximum, MergeMode::Minimum})
      check_merge(lo.ctx(), lo.type, m, rng);
  }
}

TEST_CASE("merge maximum and minimum give ties to the earliest input and pass a NaN on", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    OpContext& ctx = be.ctx();
    // Element 0: all equal; 1: inputs 1 and 2 tie for the extreme; 2: a NaN in input 1;
    // 3: -0 and +0 (equal: the earliest); 4: infinities.
    const ref::Vec a{2.0, 1.0, 5.0, -0.0, -INFINITY}, b{2.0, 4.0, NAN, 0.0, INFINITY}, c{2.0, 4.0, 9.0, 0.0, 1.0};
    const Shape s{5};
    const Tensor ta = to_device(ctx, make(s, DType::F32, a)), tb = to_device(ctx, make(s, DType::F32, b)),
                 tc = to_device(ctx, make(s, DType::F32, c)), dy = to_device(ctx, make(s, DType::F32, {1, 2, 3, 4, 5}));
    for (MergeMode m : {MergeMode::Maximum, MergeMode::Minimum}) {
      INFO(mode_name(m));
      auto k = make_kernel<MergeKernel>(ctx, MergeParams{m});
      Tensor y = to_device(ctx, nan_of(s, DType::F32));
      k->forward({&ta, &tb, &tc}, y);
      const ref::Vec got = values(to_host(ctx, y));
      CHECK(got[0] == 2.0);
      CHECK(got[1] == (m == MergeMode::Maximum ? 4.0 : 1.0));
      CHECK(std::isnan(got[2]));
      CHECK(got[3] == 0.0);
      CHECK(std::signbit(got[3]));  // -0 from input 0, the earliest of the equal values
      CHECK(got[4] == (m == MergeMode::Maximum ? INFINITY : -INFINITY));
      std::vector<Tensor> d;
      for (int i = 0; i < 3; ++i) d.push_back(to_device(ctx, nan_of(s, DType::F32)));
      k->backward({&ta, &tb, &tc}, dy, {&d[0], &d[1], &d[2]});
      const ref::Vec da = values(to_host(ctx, d[0])), db = values(to_host(ctx, d[1])), dc = values(to_host(ctx, d[2]));
      CHECK(da == ref::Vec{1, m == MergeMode::Maximum ? 0.0 : 2.0, 0, 4, m == MergeMode::Maximum ? 0.0 : 5.0});
      CHECK(db == ref::Vec{0, m == MergeMode::Maximum ? 2.0 : 0.0, 3, 0, m == MergeMode::Maximum ? 5.0 : 0.0});
      CHECK(dc == ref::Vec{0, 0, 0, 0, 0});
    }
  }
}

TEST_CASE("merge refuses wrong counts, shapes, types and aliasing, naming the argument", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    OpContext& ctx = be.ctx();
    const Tensor a = to_device(ctx, make({2, 3}, DType::F32, ref::Vec(6, 1.0))),
                 b = to_device(ctx, make({2, 3}, DType::F32, ref::Vec(6, 2.0))),
                 odd = to_device(ctx, make({3, 2}, DType::F32, ref::Vec(6, 1.0)));
    Tensor y = to_device(ctx, nan_of({2, 3}, DType::F32)), d0 = to_device(ctx, nan_of({2, 3}, DType::F32));
    auto sub = make_kernel<MergeKernel>(ctx, MergeParams{MergeMode::Subtract});
    auto avg = make_kernel<MergeKernel>(ctx, MergeParams{MergeMode::Average});
    CHECK_THROWS_WITH(sub->forward({&a, &b, &a}, y), Catch::Contains("merge: subtract takes exactly 2 inputs, got 3"));
    CHECK_THROWS_WITH(avg->forward({&a}, y), Catch::Contains("takes 2 to 64 inputs, got 1"));
    std::vector<const Tensor*> many(65, &a);
    CHECK_THROWS_WITH(avg->forward(many, y), Catch::Contains("got 65"));
    CHECK_THROWS_WITH(avg->forward({&a, &odd}, y), Catch::Contains("input 1"));
    CHECK_THROWS_WITH(avg->forward({&a, &y}, y), Catch::Contains("input 1 aliases y"));
    CHECK_THROWS_WITH(avg->backward({&a, &b}, y, {&d0}), Catch::Contains("2 inputs but 1 gradients"));
    CHECK_THROWS_WITH(avg->backward({&a, &b}, y, {&d0, &d0}), Catch::Contains("gradient 1 aliases gradient 0"));
    Tensor ydy = y;
    CHECK_THROWS_WITH(avg->backward({&a, &b}, y, {&ydy, nullptr}), Catch::Contains("gradient 0 aliases dy"));
    const Tensor ints = to_device(ctx, Tensor::empty({2, 3}, DType::I32));
    CHECK_THROWS_WITH(avg->forward({&ints, &ints}, y), Catch::Contains("input 0"));
  }
}
