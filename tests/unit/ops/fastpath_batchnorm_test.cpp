// Batch norm's fast paths against their reference paths on random cases, bit for bit: the gate from x, sibling passes, strided slices and the fused activation (on every backend).
//
// Fast: a context with bn_gate, bn_siblings, slices and bn_act: the parts' y and dy are channel
// slices of one wide [m, W] tensor, the parts run as one sibling pass (more than one part), the
// activation is fused and backward decides its gate from x. Reference: every fast path off: each
// part alone on contiguous tensors, the activation as its own kernel (forward, then backward from
// its output), batch norm's backward with the gradient it passes. The same arithmetic by design
// (cpu_batchnorm_rows.h), so the same bits: y, saved and running statistics, dx, dgamma, dbeta.
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "backends.h"
#include "core/ops/activation.h"
#include "core/ops/batchnorm.h"
#include "fastpath_fuzz.h"

using namespace trainer;
using namespace trainer::test;
namespace fz = trainer::test::fuzz;
namespace b16 = trainer::test::bf16_check;

namespace {

struct Part {
  int64_t C;
  ref::Vec x, dy, gamma, beta, rm, rv;
};

// What one path produced, per part: y, dx (the input type's values), the f32 [C] results.
struct Result {
  std::vector<ref::Vec> y, dx, stats;
};

// Activations of part p with structure: per channel a random offset and scale (some channels
// constant: variance 0), then gamma large enough that many normalised values reach the clamp, and
// now and then a channel whose every output lies exactly on a bound.
Part random_part(std::mt19937_64& rng, int64_t m, int64_t C, DType t) {
  Part p{C, {}, {}, {}, {}, {}, {}};
  std::normal_distribution<double> z(0, 1);
  ref::Vec offset(static_cast<size_t>(C)), scale(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    offset[size_t(c)] = std::ldexp(z(rng), int(uniform_int(rng, -8, 8)));
    scale[size_t(c)] = std::bernoulli_distribution(0.1)(rng) ? 0.0 : std::ldexp(1.0, int(uniform_int(rng, -12, 6)));
    // Now and then gamma 0 with beta 0 or 6: every output of the channel exactly at a clamp bound.
    const bool flat = std::bernoulli_distribution(0.05)(rng);
    p.gamma.push_back(flat ? 0.0 : b16::round_to(DType::F32, std::ldexp(z(rng), int(uniform_int(rng, -2, 3)))));
    p.beta.push_back(flat ? 6.0 * double(uniform_int(rng, 0, 1)) : b16::round_to(DType::F32, 3 * z(rng)));
    p.rm.push_back(0.1 * z(rng));
    p.rv.push_back(1 + std::fabs(z(rng)));
  }
  p.x.resize(size_t(m * C));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c)
      p.x[size_t(r * C + c)] = b16::round_to(t, offset[size_t(c)] + scale[size_t(c)] * z(rng));
  p.dy = fz::wide_values(size_t(m * C), rng, t, -40, 0, true);
  return p;
}

Tensor f32v(const ref::Vec& v) { return b16::make({int64_t(v.size())}, DType::F32, v); }

// Columns [at, at + C) of a host [m, W] tensor's rows as values.
ref::Vec columns(const Tensor& wide, int64_t m, int64_t W, int64_t at, int64_t C) {
  const ref::Vec all = b16::values(wide);
  ref::Vec v;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) v.push_back(all[size_t(r * W + at + c)]);
  return v;
}

Result run_fast(OpContext& ctx, const std::vector<Part>& parts, int64_t m, DType t, ActKind act) {
  int64_t W = 0;
  for (const Part& p : parts) W += p.C;
  BatchNormParams bp;
  bp.activation = act;
  std::vector<std::unique_ptr<BatchNormKernel>> k;
  for (size_t q = 0; q < parts.size(); ++q) k.push_back(make_kernel<BatchNormKernel>(ctx, bp));
  REQUIRE(k[0]->strided_rows());
  REQUIRE(k[0]->can_fuse(act));
  Tensor y = b16::nan_of({m, W}, t), dyw = Tensor::empty({m, W}, t);
  std::vector<Tensor> x, g, b, mean, invstd, rm, rv, dx, dg, db, yv, dyv;
  ref::Vec dy_all(size_t(m * W));
  int64_t at = 0;
  for (const Part& p : parts) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < p.C; ++c) dy_all[size_t(r * W + at + c)] = p.dy[size_t(r * p.C + c)];
    at += p.C;
  }
  dyw = b16::make({m, W}, t, dy_all);
  const size_t esz = dtype_size(t);
  at = 0;
  for (const Part& p : parts) {
    x.push_back(b16::make({m, p.C}, t, p.x));
    g.push_back(f32v(p.gamma)), b.push_back(f32v(p.beta)), rm.push_back(f32v(p.rm)), rv.push_back(f32v(p.rv));
    mean.push_back(b16::nan_of({p.C}, DType::F32)), invstd.push_back(b16::nan_of({p.C}, DType::F32));
    dx.push_back(b16::nan_of({m, p.C}, t)), dg.push_back(b16::nan_of({p.C}, DType::F32));
    db.push_back(b16::nan_of({p.C}, DType::F32));
    yv.push_back(Tensor::strided_view(static_cast<char*>(y.data()) + at * esz, {m, p.C}, t, y.device(), W));
    dyv.push_back(Tensor::strided_view(static_cast<char*>(dyw.data()) + at * esz, {m, p.C}, t, y.device(), W));
    at += p.C;
  }
  if (parts.size() > 1 && k[0]->joins_siblings()) {
    std::vector<BatchNormKernel::SiblingForward> f;
    std::vector<BatchNormKernel::Sibling> s;
    for (size_t q = 0; q < parts.size(); ++q) {
      f.push_back({k[q].get(), &x[q], &g[q], &b[q], &mean[q], &invstd[q], &rm[q], &rv[q]});
      s.push_back({k[q].get(), &x[q], &g[q], &mean[q], &invstd[q], &dx[q], &dg[q], &db[q]});
    }
    k.back()->forward_siblings(true, y, f);
    k.back()->backward_siblings(y, dyw, s);
  } else {
    for (size_t q = 0; q < parts.size(); ++q) k[q]->forward_train(x[q], g[q], b[q], yv[q], mean[q], invstd[q], rm[q], rv[q]);
    for (size_t q = 0; q < parts.size(); ++q)
      k[q]->backward(x[q], yv[q], g[q], dyv[q], mean[q], invstd[q], dx[q], dg[q], db[q]);
  }
  Result res;
  at = 0;
  for (size_t q = 0; q < parts.size(); ++q) {
    res.y.push_back(columns(y, m, W, at, parts[q].C));
    res.dx.push_back(b16::values(dx[q]));
    ref::Vec st;
    for (const Tensor* s : {&mean[q], &invstd[q], &rm[q], &rv[q], &dg[q], &db[q]}) {
      const ref::Vec v = b16::values(*s);
      st.insert(st.end(), v.begin(), v.end());
    }
    res.stats.push_back(st);
    at += parts[q].C;
  }
  return res;
}

Result run_reference(OpContext& ctx, const std::vector<Part>& parts, int64_t m, DType t, ActKind act) {
  auto bn = make_kernel<BatchNormKernel>(ctx, BatchNormParams{});
  std::unique_ptr<ActivationKernel> a;
  if (act != ActKind::Linear) a = make_kernel<ActivationKernel>(ctx, ActivationParams{act});
  Result res;
  for (const Part& p : parts) {
    const Tensor x = b16::make({m, p.C}, t, p.x);
    Tensor g = f32v(p.gamma), b = f32v(p.beta), rm = f32v(p.rm), rv = f32v(p.rv);
    Tensor mean = b16::nan_of({p.C}, DType::F32), invstd = b16::nan_of({p.C}, DType::F32);
    Tensor y = b16::nan_of({m, p.C}, t), dx = b16::nan_of({m, p.C}, t), dg = b16::nan_of({p.C}, DType::F32);
    Tensor db = b16::nan_of({p.C}, DType::F32), dy = b16::make({m, p.C}, t, p.dy);
    bn->forward_train(x, g, b, y, mean, invstd, rm, rv);
    Tensor out = y, dout = dy;
    if (a) {  // the activation's own kernel: forward, then its backward from its output
      out = b16::nan_of({m, p.C}, t);
      a->forward(y, out);
      dout = b16::nan_of({m, p.C}, t);
      a->backward(y, out, dy, dout);
    }
    bn->backward(x, y, g, dout, mean, invstd, dx, dg, db);
    res.y.push_back(b16::values(out));
    res.dx.push_back(b16::values(dx));
    ref::Vec st;
    for (const Tensor* s : {&mean, &invstd, &rm, &rv, &dg, &db}) {
      const ref::Vec v = b16::values(*s);
      st.insert(st.end(), v.begin(), v.end());
    }
    res.stats.push_back(st);
  }
  return res;
}

// Whether two vectors hold the same values bit for bit (NaN equal to NaN: an unwritten element
// shows on both sides or neither, and is caught by the finite check).
bool same(const ref::Vec& a, const ref::Vec& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

bool finite(const ref::Vec& v) {
  for (double e : v)
    if (!std::isfinite(e)) return false;
  return true;
}

}  // namespace

TEST_CASE("fast paths bn_gate, bn_siblings, slices and bn_act: batch norm on slices, in sibling passes, with the activation fused and its gate from x equals the one-by-one reference bit for bit, over random shapes, 1-4 threads", "[fuzz]") {
  fz::Budget budget(400);
  fz::Tally tally{"bn_gate + bn_siblings + slices + bn_act (batch norm, bit for bit)"};
  const ActKind acts[] = {ActKind::Linear, ActKind::Relu, ActKind::Relu6};
  int64_t at_bounds = 0;  // outputs at a clamp bound (clamped or exactly on it)
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 4);
    const DType t = std::bernoulli_distribution(0.5)(rng) ? DType::BF16 : DType::F32;
    const int64_t m = uniform_int(rng, 0, 9) == 0 ? uniform_int(rng, 0, 2) : uniform_int(rng, 3, 5000);
    const int P = int(uniform_int(rng, 1, 3));
    const ActKind act = acts[uniform_int(rng, 0, 2)];
    const int threads = fz::threads(rng);
    std::vector<Part> parts;
    for (int q = 0; q < P; ++q) {
      const int64_t C = uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, 1, 3) : uniform_int(rng, 4, 70);
      parts.push_back(random_part(rng, m, C, t));
    }
    std::ostringstream what;
    what << "case " << i << ": " << m << " rows, " << P << " part(s) of";
    for (const Part& p : parts) what << " " << p.C;
    what << " channels, " << dtype_name(t) << ", activation " << activation_name(act) << ", " << threads
         << " thread(s); " << budget.repro(i);
    INFO(what.str());
    const Precision prec = Precision::FP32;  // the batch norm kernels take bf16 tensors in any context
    const Result f = run_fast(fz::cpu_context_for(threads, prec, FastPaths::all()), parts, m, t, act);
    const Result r = run_reference(fz::cpu_context_for(threads, prec, FastPaths::none()), parts, m, t, act);
    bool all_same = true;
    for (size_t q = 0; q < parts.size(); ++q) {
      INFO("part " << q);
      CHECK(same(f.y[q], r.y[q]));
      CHECK(same(f.dx[q], r.dx[q]));
      CHECK(same(f.stats[q], r.stats[q]));
      CHECK(finite(f.y[q]));
      CHECK(finite(f.dx[q]));
      all_same = all_same && same(f.y[q], r.y[q]) && same(f.dx[q], r.dx[q]) && same(f.stats[q], r.stats[q]);
      for (double v : r.y[q]) at_bounds += act != ActKind::Linear && (v == 0.0 || (act == ActKind::Relu6 && v == 6.0));
    }
    tally.exact(threads, all_same ? 0.0 : INFINITY);
  }
  tally.report(budget);
  WARN("batch norm fast paths: " << at_bounds << " outputs at a clamp bound (0 or 6) among those compared");
}

namespace {

// A context on device d with fast paths f, made once and never destroyed (as backends.h's: a CUDA
// context torn down at exit races the runtime's own shutdown); the map itself is never destroyed
// either, so the contexts stay reachable (LeakSanitizer).
OpContext& context_on(Device d, FastPaths f) {
  static auto* made = new std::map<std::pair<std::string, uint32_t>, OpContext*>;
  OpContext*& c = (*made)[{d.str(), f.bits()}];
  if (!c) {
    ContextOptions o;
    o.threads = 2;
    o.fast = f;
    c = make_context(d, o).release();
  }
  c->bind_thread();
  return *c;
}

// One batch norm on c: with `act` fused into it, or followed by the activation's own kernel.
Result run_on(OpContext& c, const Part& p, int64_t m, ActKind act, bool fused) {
  BatchNormParams bp;
  bp.activation = fused ? act : ActKind::Linear;
  auto bn = make_kernel<BatchNormKernel>(c, bp);
  if (fused) REQUIRE(bn->can_fuse(act));
  auto up = [&](const Tensor& h) { return to_device(c, h); };
  const Tensor x = up(b16::make({m, p.C}, DType::F32, p.x)), dy = up(b16::make({m, p.C}, DType::F32, p.dy));
  Tensor g = up(f32v(p.gamma)), b = up(f32v(p.beta)), rm = up(f32v(p.rm)), rv = up(f32v(p.rv));
  Tensor mean = up(b16::nan_of({p.C}, DType::F32)), invstd = up(b16::nan_of({p.C}, DType::F32));
  Tensor y = up(b16::nan_of({m, p.C}, DType::F32)), dx = up(b16::nan_of({m, p.C}, DType::F32));
  Tensor dg = up(b16::nan_of({p.C}, DType::F32)), db = up(b16::nan_of({p.C}, DType::F32));
  bn->forward_train(x, g, b, y, mean, invstd, rm, rv);
  Tensor out = y, dout = dy;
  if (!fused) {
    auto a = make_kernel<ActivationKernel>(c, ActivationParams{act});
    out = up(b16::nan_of({m, p.C}, DType::F32));
    a->forward(y, out);
    dout = up(b16::nan_of({m, p.C}, DType::F32));
    a->backward(y, out, dy, dout);
  }
  bn->backward(x, y, g, dout, mean, invstd, dx, dg, db);
  c.synchronize();
  Result r;
  r.y.push_back(b16::values(to_host(c, out)));
  r.dx.push_back(b16::values(to_host(c, dx)));
  ref::Vec st;
  for (const Tensor* s : {&mean, &invstd, &rm, &rv, &dg, &db}) {
    const ref::Vec v = b16::values(to_host(c, *s));
    st.insert(st.end(), v.begin(), v.end());
  }
  r.stats.push_back(st);
  return r;
}

}  // namespace

TEST_CASE("fast path bn_act on every backend: batch norm with its ReLU or ReLU6 fused equals batch norm then the activation's kernel bit for bit, over random shapes", "[backends][fuzz]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    fz::Budget budget(100);
    fz::Tally tally{"bn_act (fused vs batch norm then the activation) on " + be.name};
    for (int64_t i = 0; budget.more(i); ++i) {
      if (budget.skip(i)) continue;
      std::mt19937_64 rng = budget.rng(i, 5);
      const int64_t m = uniform_int(rng, 1, 3000), C = uniform_int(rng, 1, 70);
      const ActKind act = std::bernoulli_distribution(0.5)(rng) ? ActKind::Relu : ActKind::Relu6;
      const Part p = random_part(rng, m, C, DType::F32);
      INFO("case " << i << ": " << m << " rows, " << C << " channels, " << activation_name(act) << ", "
                   << budget.repro(i));
      const Device d = be.context->device();
      const Result f = run_on(context_on(d, FastPaths::all()), p, m, act, true);
      const Result r = run_on(context_on(d, FastPaths::none()), p, m, act, false);
      CHECK(same(f.y[0], r.y[0]));
      CHECK(same(f.dx[0], r.dx[0]));
      CHECK(same(f.stats[0], r.stats[0]));
      CHECK(finite(f.dx[0]));
      tally.exact(2, same(f.y[0], r.y[0]) && same(f.dx[0], r.dx[0]) && same(f.stats[0], r.stats[0]) ? 0.0 : INFINITY);
    }
    tally.report(budget);
  }
}
