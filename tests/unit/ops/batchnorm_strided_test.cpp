// Batch norm with y and dy as strided rows (a channel slice of a concat's output and gradient): the contiguous results bit for bit, other columns untouched; refused where a backend does not take them.
#include <cstring>

#include "core/ops/batchnorm.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

// Raw element bits of a host tensor's [rows, width] columns, row by row (its row stride apart).
std::vector<uint32_t> bits(const Tensor& t) {
  const int64_t C = t.shape().back(), rows = C ? t.numel() / C : 0, esz = int64_t(dtype_size(t.dtype()));
  std::vector<uint32_t> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      uint32_t v = 0;
      std::memcpy(&v, static_cast<const char*>(t.data()) + (r * t.row_stride() + c) * esz, size_t(esz));
      out.push_back(v);
    }
  return out;
}

// Raw bits of several host tensors, one after another.
std::vector<uint32_t> all_bits(std::initializer_list<const Tensor*> ts) {
  std::vector<uint32_t> out;
  for (const Tensor* t : ts) {
    const std::vector<uint32_t> b = bits(*t);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

// A host buffer [rows, W] of sentinel bytes and the strided view of its columns [at, at + C).
struct Wide {
  Tensor all;
  Tensor view;
  Wide(const Shape& s, DType dt, int64_t extra, int64_t at) {
    const int64_t C = s.back(), rows = C ? s.numel() / C : 0, W = C + extra;
    all = Tensor::empty(Shape{rows, W}, dt);
    std::memset(all.data(), 0x5a, all.bytes());
    view = Tensor::strided_view(static_cast<char*>(all.data()) + at * int64_t(dtype_size(dt)), s, dt, all.device(), W);
  }
  // Whether the columns outside the view still hold the sentinel.
  bool others_untouched(int64_t at, int64_t C) const {
    const int64_t W = all.shape().back(), esz = int64_t(dtype_size(all.dtype()));
    const auto* b = static_cast<const unsigned char*>(all.data());
    for (int64_t r = 0; r < all.shape()[0]; ++r)
      for (int64_t c = 0; c < W; ++c)
        if (c < at || c >= at + C)
          for (int64_t k = 0; k < esz; ++k)
            if (b[(r * W + c) * esz + k] != 0x5a) return false;
    return true;
  }
};

struct Run {
  std::vector<uint32_t> y, dx, y_infer, dx_read_y, dx_apply;
  std::vector<float> stats;  // mean, invstd, running mean and variance, dgamma, dbeta, backward sums
};

// Training forward, backward (with forward's kept coefficients, then with y read: other saved
// statistics' tensors), inference, and the synchronised pieces over strided or contiguous y and dy.
Run run(ActKind act, const Shape& s, DType dt, const ref::Vec& xv, const ref::Vec& dyv, bool strided) {
  const int64_t C = s.back(), extra = 3, at = 2;
  BatchNormParams p;
  p.activation = act;
  auto bn = make_kernel<BatchNormKernel>(cpu_ctx(), p);
  auto plain = make_kernel<BatchNormKernel>(cpu_ctx(), BatchNormParams{});
  REQUIRE(bn->strided_rows());
  auto f32 = [&](double v) { return make({C}, DType::F32, ref::Vec(size_t(C), v)); };
  Tensor x = make(s, dt, xv), gamma = make({C}, DType::F32, ref::Vec(size_t(C), 1.3)), beta = f32(-0.2);
  Tensor mean = f32(0), invstd = f32(0), rm = f32(0.1), rv = f32(1.2), dg = f32(0), db = f32(0);
  Tensor dx = nan_of(s, dt), dx2 = nan_of(s, dt), dx3 = nan_of(s, dt), sdy = f32(0), sdx = f32(0);
  Wide yw(s, dt, extra, at), yiw(s, dt, extra, at), dyw(s, dt, extra, at);
  Tensor y = strided ? yw.view : nan_of(s, dt), yi = strided ? yiw.view : nan_of(s, dt);
  Tensor dy = strided ? dyw.view : make(s, dt, dyv);
  if (strided) {  // dy's values into the slice
    const Tensor d = make(s, dt, dyv);
    for (int64_t r = 0; C && r < s.numel() / C; ++r)
      std::memcpy(static_cast<char*>(dy.data()) + r * dy.row_stride() * int64_t(dtype_size(dt)),
                  static_cast<const char*>(d.data()) + r * C * int64_t(dtype_size(dt)), size_t(C) * dtype_size(dt));
  }
  bn->forward_train(x, gamma, beta, y, mean, invstd, rm, rv);
  bn->backward(x, y, gamma, dy, mean, invstd, dx, dg, db);
  Run out;
  out.dx = bits(dx);
  Tensor mean2 = copy_of(mean);  // not the statistics forward kept coefficients for: y is read
  bn->backward(x, y, gamma, dy, mean2, invstd, dx2, dg, db);
  out.dx_read_y = bits(dx2);
  bn->forward_infer(x, gamma, beta, rm, rv, yi);
  plain->backward_sums(x, dy, mean, sdy, sdx);
  const float count = float(C ? s.numel() / C : 0) + 3.0f;
  Tensor count_t = Tensor::empty(Shape{1});
  count_t.f32()[0] = count;
  plain->backward_apply(x, dy, gamma, mean, invstd, sdy, sdx, count_t, dx3);
  out.dx_apply = bits(dx3);
  out.y = bits(y);
  out.y_infer = bits(yi);
  for (const Tensor* t : {&mean, &invstd, &rm, &rv, &dg, &db, &sdy, &sdx})
    out.stats.insert(out.stats.end(), t->f32(), t->f32() + C);
  if (strided) {
    CHECK(yw.others_untouched(at, C));
    CHECK(yiw.others_untouched(at, C));
  }
  return out;
}

}  // namespace

TEST_CASE("batchnorm: y and dy as strided rows give the contiguous results bit for bit") {
  std::mt19937_64 rng(23);
  for (ActKind act : {ActKind::Linear, ActKind::Relu, ActKind::Relu6})
    for (DType dt : {DType::F32, DType::BF16})
      for (const Shape& s : {Shape{2, 5, 5, 7}, Shape{3, 4, 4, 1}, Shape{1, 1, 1, 33}, Shape{64, 8, 8, 32}}) {
        INFO(activation_name(act) << " " << dtype_name(dt) << " [" << s.str() << "]");
        const ref::Vec x = random_values(s, rng, dt, -2.0, 2.0), dy = random_values(s, rng, dt);
        const Run a = run(act, s, dt, x, dy, false), b = run(act, s, dt, x, dy, true);
        CHECK(a.y == b.y);
        CHECK(a.dx == b.dx);
        CHECK(a.dx_read_y == b.dx_read_y);
        CHECK(a.y_infer == b.y_infer);
        CHECK(a.dx_apply == b.dx_apply);
        CHECK(a.stats == b.stats);
      }
}

TEST_CASE("batchnorm: a backend without strided rows refuses them, x and dx stay contiguous everywhere", "[backends]") {
  const Shape s{2, 3, 3, 4};
  std::mt19937_64 rng(3);
  for (const Backend& be : backends()) SECTION(be.name) {
    auto bn = make_kernel<BatchNormKernel>(be.ctx(), BatchNormParams{});
    Tensor wide = be.upload(random_tensor(Shape{18, 6}, rng));
    Tensor strided = Tensor::strided_view(wide.data(), s, DType::F32, wide.device(), 6);
    Tensor x = be.upload(random_tensor(s, rng)), y = be.nan(s), c = be.zeros({4}), c2 = be.zeros({4}), rm = be.zeros({4}),
           rv = be.upload(make({4}, DType::F32, ref::Vec(4, 1.0))), dx = be.nan(s);
    Tensor none;
    // x strided: refused on every backend.
    CHECK_THROWS_WITH(bn->forward_train(strided, none, none, y, c, c2, rm, rv),
                      Catch::Contains("x is a strided view") && Catch::Contains("contiguous"));
    bn->forward_train(x, none, none, y, c, c2, rm, rv);
    CHECK_THROWS_WITH(bn->backward(x, y, none, y, c, c2, strided, none, none), Catch::Contains("dx is a strided view"));
    if (bn->strided_rows()) {
      bn->backward(x, y, none, strided, c, c2, dx, none, none);  // taken
      continue;
    }
    CHECK_THROWS_WITH(bn->forward_train(x, none, none, strided, c, c2, rm, rv), Catch::Contains("y is a strided view"));
    CHECK_THROWS_WITH(bn->backward(x, y, none, strided, c, c2, dx, none, none), Catch::Contains("dy is a strided view"));
  }
}

namespace {

// One sibling of a concat: its kernel, input, parameters, saved statistics, gradients, and its
// slices of the concat's output and gradient.
struct Sib {
  std::unique_ptr<BatchNormKernel> k;
  Tensor x, gamma, beta, mean, invstd, rm, rv, dx, dg, db, y, dy, yi;
};

// Siblings of widths `widths` over rows `lead` run one by one or as one pass (forward_siblings,
// backward_siblings), from the same values: every output's bits, part by part.
struct SibRun {
  std::vector<std::vector<uint32_t>> y, y_infer, dx, stats;
};
SibRun run_siblings(bool joined, ActKind act, DType dt, const std::vector<int64_t>& lead,
                    const std::vector<int64_t>& widths, bool kept, bool dx_all, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t W = 0;
  for (int64_t w : widths) W += w;
  auto shape = [&](int64_t c) {
    std::vector<int64_t> d = lead;
    d.push_back(c);
    return Shape(d);
  };
  const int64_t esz = int64_t(dtype_size(dt));
  Tensor y = nan_of(shape(W), dt), yi = nan_of(shape(W), dt), dy = make(shape(W), dt, random_values(shape(W), rng, dt));
  BatchNormParams p;
  p.activation = act;
  std::vector<Sib> sibs(widths.size());
  int64_t at = 0;
  for (size_t i = 0; i < sibs.size(); ++i) {
    Sib& s = sibs[i];
    const int64_t C = widths[i];
    const Shape sh = shape(C);
    auto f32 = [&](double v) { return make({C}, DType::F32, ref::Vec(size_t(C), v)); };
    p.momentum = 0.9f + 0.03f * float(i);  // the parts' own parameters
    p.epsilon = 1e-3f * float(i + 1);
    s.k = make_kernel<BatchNormKernel>(cpu_ctx(), p);
    REQUIRE(s.k->joins_siblings());
    s.x = make(sh, dt, random_values(sh, rng, dt, -2.0, 2.0));
    s.gamma = i == 1 ? Tensor() : make({C}, DType::F32, random_values(Shape{C}, rng, DType::F32, 0.5, 1.5));
    s.beta = i == 2 ? Tensor() : f32(0.1 * double(i) - 0.2);
    s.mean = f32(0), s.invstd = f32(0), s.rm = f32(0.1), s.rv = f32(1.2);
    s.dx = dx_all || i != 0 ? nan_of(sh, dt) : Tensor();
    s.dg = nan_of({C}, DType::F32), s.db = nan_of({C}, DType::F32);
    s.y = Tensor::strided_view(static_cast<char*>(y.data()) + at * esz, sh, dt, y.device(), W);
    s.yi = Tensor::strided_view(static_cast<char*>(yi.data()) + at * esz, sh, dt, yi.device(), W);
    s.dy = Tensor::strided_view(static_cast<char*>(dy.data()) + at * esz, sh, dt, dy.device(), W);
    at += C;
  }
  const Tensor no_y = act == ActKind::Linear ? Tensor() : y;
  if (joined) {
    std::vector<BatchNormKernel::SiblingForward> fp;
    for (Sib& s : sibs) fp.push_back({s.k.get(), &s.x, &s.gamma, &s.beta, &s.mean, &s.invstd, &s.rm, &s.rv});
    sibs.back().k->forward_siblings(true, y, fp);
  } else {
    for (Sib& s : sibs) s.k->forward_train(s.x, s.gamma, s.beta, s.y, s.mean, s.invstd, s.rm, s.rv);
  }
  SibRun out;
  for (Sib& s : sibs) {
    out.y.push_back(bits(s.y));
    out.stats.push_back(all_bits({&s.mean, &s.invstd, &s.rm, &s.rv}));
    if (!kept) s.mean = copy_of(s.mean);  // not the statistics forward kept coefficients for: y is read
  }
  if (joined) {
    std::vector<BatchNormKernel::Sibling> bp;
    for (Sib& s : sibs) bp.push_back({s.k.get(), &s.x, &s.gamma, &s.mean, &s.invstd, &s.dx, &s.dg, &s.db});
    sibs.front().k->backward_siblings(no_y, dy, bp);
    std::vector<BatchNormKernel::SiblingForward> ip;
    for (Sib& s : sibs) ip.push_back({s.k.get(), &s.x, &s.gamma, &s.beta, nullptr, nullptr, &s.rm, &s.rv});
    sibs.front().k->forward_siblings(false, yi, ip);
  } else {
    for (Sib& s : sibs) {
      s.k->backward(s.x, act == ActKind::Linear ? Tensor() : s.y, s.gamma, s.dy, s.mean, s.invstd, s.dx, s.dg, s.db);
      s.k->forward_infer(s.x, s.gamma, s.beta, s.rm, s.rv, s.yi);
    }
  }
  for (Sib& s : sibs) {
    out.y_infer.push_back(bits(s.yi));
    out.dx.push_back(s.dx.defined() ? bits(s.dx) : std::vector<uint32_t>());
    out.stats.push_back(all_bits({&s.dg, &s.db}));
  }
  return out;
}

}  // namespace

TEST_CASE("batchnorm: siblings of one concat in one pass give their separate results bit for bit") {
  struct Case {
    std::vector<int64_t> lead, widths;
  };
  const std::vector<Case> cases = {
      {{2, 5, 5}, {7, 9}}, {{64, 8, 8}, {32, 48}}, {{3, 1, 1}, {1, 16, 5}}, {{1, 2}, {3, 4}}, {{0, 3}, {2, 5}}};
  uint64_t seed = 41;
  for (ActKind act : {ActKind::Linear, ActKind::Relu, ActKind::Relu6})
    for (DType dt : {DType::F32, DType::BF16})
      for (const Case& cs : cases)
        for (bool kept : {true, false})
          for (bool dx_all : {true, false}) {
            INFO(activation_name(act) << " " << dtype_name(dt) << " rows of " << cs.lead.size() << " axes, "
                                      << cs.widths.size() << " parts, kept " << kept << " every dx " << dx_all);
            ++seed;
            const SibRun a = run_siblings(false, act, dt, cs.lead, cs.widths, kept, dx_all, seed),
                         b = run_siblings(true, act, dt, cs.lead, cs.widths, kept, dx_all, seed);
            for (size_t i = 0; i < cs.widths.size(); ++i) {
              INFO("part " << i);
              // bools: no dump of the vectors
              CHECK((a.y[i] == b.y[i]));
              CHECK((a.y_infer[i] == b.y_infer[i]));
              CHECK((a.dx[i] == b.dx[i]));
            }
            CHECK((a.stats == b.stats));
          }
}

TEST_CASE("batchnorm: sibling passes refuse parts that do not fill the rows, differ in activation or lack a tensor") {
  const Shape s{2, 3, 3, 4}, wide{2, 3, 3, 8};
  std::mt19937_64 rng(5);
  BatchNormParams relu;
  relu.activation = ActKind::Relu;
  auto a = make_kernel<BatchNormKernel>(cpu_ctx(), BatchNormParams{});
  auto b = make_kernel<BatchNormKernel>(cpu_ctx(), relu);
  Tensor x = random_tensor(s, rng), m = make({4}, DType::F32, ref::Vec(4, 0.0));
  Tensor v = make({4}, DType::F32, ref::Vec(4, 1.0));
  Tensor dy = random_tensor(wide, rng), dx = nan_of(s, DType::F32), none;
  BatchNormKernel::Sibling pa{a.get(), &x, &none, &m, &v, &dx, &none, &none};
  CHECK_THROWS_WITH(a->backward_siblings(none, dy, {pa}), Catch::Contains("the parts have 4 channels, dy 8"));
  BatchNormKernel::Sibling pb{b.get(), &x, &none, &m, &v, &dx, &none, &none};
  CHECK_THROWS_WITH(a->backward_siblings(none, dy, {pa, pb}), Catch::Contains("activations differ"));
  Tensor x3 = random_tensor(Shape{2, 3, 2, 4}, rng);
  BatchNormKernel::Sibling pc{a.get(), &x3, &none, &m, &v, &dx, &none, &none};
  CHECK_THROWS_WITH(a->backward_siblings(none, dy, {pa, pc}), Catch::Contains("does not match dy's rows"));
  a->backward_siblings(none, dy, {pa, pa});  // two parts of 4: accepted
  // Forward, likewise.
  Tensor y = random_tensor(wide, rng);
  BatchNormKernel::SiblingForward fa{a.get(), &x, &none, &none, &m, &v, &m, &v};
  CHECK_THROWS_WITH(a->forward_siblings(true, y, {fa}), Catch::Contains("the parts have 4 channels, y 8"));
  BatchNormKernel::SiblingForward fb{b.get(), &x, &none, &none, &m, &v, &m, &v};
  CHECK_THROWS_WITH(a->forward_siblings(true, y, {fa, fb}), Catch::Contains("activations differ"));
  BatchNormKernel::SiblingForward fc{a.get(), &x, &none, &none, nullptr, nullptr, &m, &v};
  CHECK_THROWS_WITH(a->forward_siblings(true, y, {fa, fc}), Catch::Contains("a part's tensor is missing"));
  a->forward_siblings(false, y, {fa, fc});  // inference needs no saved statistics
}
