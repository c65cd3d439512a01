// Kernel math: pad_math.h (pad2d, and conv2d's explicit padding beyond cuDNN's symmetric pad) and depthwise_math.h (per-output accumulation, the filter gradient's chunks) against the float64 references.
#include "core/ops/math/depthwise_math.h"

#include "core/ops/math/pad_math.h"
#include "core/ops/window.h"
#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

// pad_forward_kernel and pad_backward_kernel on the host; `shift` moves the source one column (a
// deliberately wrong index).
ref::Vec pad_forward(const pad_math::PadShape& s, const std::vector<float>& x, int shift = 0) {
  ref::Vec y;
  for (int64_t i = 0; i < s.n * s.oh * s.ow * s.c; ++i) {
    const int64_t src = pad_math::forward_source(s, i);
    const int64_t at = src + shift * s.c;
    y.push_back(src >= 0 && at >= 0 && at < int64_t(x.size()) ? x[at] : 0.0);
  }
  return y;
}
ref::Vec pad_backward(const pad_math::PadShape& s, const std::vector<float>& dy) {
  ref::Vec dx;
  for (int64_t i = 0; i < s.n * s.h * s.w * s.c; ++i) dx.push_back(dy[pad_math::backward_source(s, i)]);
  return dx;
}

// The largest |got - want| in units of the elementwise bound terms·u·magnitude (a sum's error
// bound: n roundings of partial sums no larger than the sum of |terms|); <= 1 passes.
double bound_ratio(const ref::Vec& got, const ref::Vec& want, const ref::Vec& magnitude, double terms) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]), bound = terms * kU * magnitude[i];
    if (std::isnan(got[i])) return INFINITY;
    if (err > 0) worst = std::max(worst, bound > 0 ? err / bound : INFINITY);
  }
  return worst;
}

ref::Vec abs_of(const std::vector<float>& v) {
  ref::Vec a;
  for (float e : v) a.push_back(std::fabs(e));
  return a;
}

struct DwCase {
  int64_t n, h, w, c;
  int m, kh, kw, sh, sw, dh, dw;
  Padding pad;
  bool bias;
};

}  // namespace

TEST_CASE("kernel math: pad2d index math (and conv2d's padding after) equals the float64 reference exactly") {
  std::mt19937_64 rng(471);
  struct Case {
    int64_t n, h, w, c;
    int top, bottom, left, right;
  };
  const Case cases[] = {{2, 5, 7, 3, 1, 2, 3, 0}, {1, 1, 1, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 2, 2, 2, 2},
                        {3, 4, 2, 5, 0, 1, 0, 1}, {0, 3, 3, 2, 1, 1, 1, 1}, {2, 3, 3, 0, 1, 1, 1, 1},
                        {1, 6, 1, 2, 3, 0, 0, 4}};
  for (const Case& k : cases) {
    INFO(k.n << "x" << k.h << "x" << k.w << "x" << k.c << " padded " << k.top << "/" << k.bottom << " x " << k.left
             << "/" << k.right);
    const pad_math::PadShape s{k.n, k.h, k.w, k.c, k.h + k.top + k.bottom, k.w + k.left + k.right, k.top, k.left};
    const ref::PadDims d{k.n, k.h, k.w, k.c, k.top, k.bottom, k.left, k.right};
    const std::vector<float> x = to_floats(random_floats(size_t(k.n * k.h * k.w * k.c), rng));
    const std::vector<float> dy = to_floats(random_floats(size_t(k.n * s.oh * s.ow * k.c), rng));
    const ref::Vec want = ref::pad2d_forward(d, to_doubles(x));
    if (x.size() > 1 && k.w > 1) check_tight("y", pad_forward(s, x), want, 0.0, pad_forward(s, x, 1));
    else check_within("y", pad_forward(s, x), want, 0.0);
    check_within("dx", pad_backward(s, dy), ref::pad2d_backward(d, to_doubles(dy)), 0.0);
    // The GPU kernels' 32-bit index math gives the same indices.
    bool same32 = true;
    for (int32_t i = 0; i < int32_t(k.n * s.oh * s.ow * k.c); ++i)
      same32 = same32 && int64_t(pad_math::forward_source(s, i)) == pad_math::forward_source(s, int64_t(i));
    for (int32_t i = 0; i < int32_t(k.n * k.h * k.w * k.c); ++i)
      same32 = same32 && int64_t(pad_math::backward_source(s, i)) == pad_math::backward_source(s, int64_t(i));
    CHECK(same32);
  }
}

// conv2d's split of each axis's padding into cuDNN's symmetric pad and explicit zeros: the pads
// are kept (both + before = pad before, both + after = pad after), nothing negative, and cuDNN takes
// as much as it can (one of the explicit sides is 0): Keras's 'same' (0/1, 1/1, 2/3), conv1d's
// causal ((k - 1)·d before), and unequal pads either way.
TEST_CASE("kernel math: conv2d's padding split into cuDNN's symmetric pad and explicit zeros keeps every pad") {
  struct Pads {
    int before, after, both, extra_before, extra_after;
  };
  for (const Pads& p : {Pads{0, 0, 0, 0, 0}, Pads{0, 1, 0, 0, 1}, Pads{1, 1, 1, 0, 0}, Pads{2, 3, 2, 0, 1},
                        Pads{4, 0, 0, 4, 0}, Pads{6, 2, 2, 4, 0}, Pads{1, 5, 1, 0, 4}}) {
    INFO(p.before << "/" << p.after);
    const pad_math::PadSplit s = pad_math::split_symmetric(p.before, p.after);
    CHECK(s.both == p.both);
    CHECK(s.before == p.extra_before);
    CHECK(s.after == p.extra_after);
  }
  for (int b = 0; b < 12; ++b)
    for (int a = 0; a < 12; ++a) {
      const pad_math::PadSplit s = pad_math::split_symmetric(b, a);
      CHECK((s.both + s.before == b && s.both + s.after == a && s.before >= 0 && s.after >= 0 && s.before * s.after == 0));
    }
}

// Each output is a chain of fmaf: forward kh·kw taps (+ bias), backward data M·kh·kw, so within
// (terms + 1)·u of the sum of |products| (the reference run on absolute values). The filter
// gradient adds a chunk's rows by fmaf, then the chunks' partials in float: (rows per chunk +
// chunks + 1)·u of the sum of |products|. Ignoring the dilation is caught.
TEST_CASE("kernel math: depthwise conv2d per-output sums and chunked filter gradient match float64") {
  const Padding S = Padding::Same, V = Padding::Valid;
  std::mt19937_64 rng(472);
  std::vector<DwCase> cases = {{2, 7, 7, 3, 1, 3, 3, 1, 1, 1, 1, S, true},  {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, V, false},
                               {1, 5, 5, 1, 2, 3, 3, 2, 2, 1, 1, S, true},  {2, 9, 8, 4, 3, 5, 5, 2, 1, 1, 1, S, true},
                               {1, 8, 8, 2, 1, 3, 3, 1, 1, 2, 2, S, false}, {2, 2, 3, 3, 1, 7, 7, 1, 1, 1, 1, S, true},
                               {1, 6, 7, 5, 2, 3, 2, 3, 2, 1, 2, V, true},  {0, 4, 4, 2, 1, 3, 3, 1, 1, 1, 1, S, true},
                               {3, 16, 16, 8, 1, 3, 3, 2, 2, 1, 1, S, true}};
  while (cases.size() < 150) {
    const DwCase c{uniform_int(rng, 1, 2),       uniform_int(rng, 1, 9),       uniform_int(rng, 1, 9),
                   uniform_int(rng, 1, 5),       int(uniform_int(rng, 1, 3)),  int(uniform_int(rng, 1, 7)),
                   int(uniform_int(rng, 1, 7)),  int(uniform_int(rng, 1, 3)),  int(uniform_int(rng, 1, 3)),
                   int(uniform_int(rng, 1, 2)),  int(uniform_int(rng, 1, 2)),  uniform_int(rng, 0, 1) ? S : V,
                   uniform_int(rng, 0, 1) == 1};
    if (window_1d(c.h, c.kh, c.sh, c.dh, c.pad).out > 0 && window_1d(c.w, c.kw, c.sw, c.dw, c.pad).out > 0)
      cases.push_back(c);
  }
  for (const DwCase& k : cases) {
    INFO(k.n << "x" << k.h << "x" << k.w << "x" << k.c << " x" << k.m << ", kernel " << k.kh << "x" << k.kw
             << ", stride " << k.sh << "x" << k.sw << ", dilation " << k.dh << "x" << k.dw << ", " << padding_name(k.pad)
             << (k.bias ? ", bias" : ""));
    const Window1d wh = window_1d(k.h, k.kh, k.sh, k.dh, k.pad), ww = window_1d(k.w, k.kw, k.sw, k.dw, k.pad);
    const int64_t oc = k.c * k.m;
    const depthwise_math::DwShape s{k.n, k.h, k.w, k.c, wh.out, ww.out, oc, k.m, k.kh, k.kw,
                                    k.sh, k.sw, k.dh, k.dw, wh.pad_before, ww.pad_before};
    const ref::ConvDims d{k.n, k.h, k.w, k.c, wh.out, ww.out, oc, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, wh.pad_before,
                          ww.pad_before};
    const std::vector<float> x = to_floats(random_floats(size_t(k.n * k.h * k.w * k.c), rng));
    const std::vector<float> w = to_floats(random_floats(size_t(k.kh * k.kw * oc), rng));
    const std::vector<float> b = to_floats(random_floats(size_t(oc), rng));
    const std::vector<float> dy = to_floats(random_floats(size_t(k.n * wh.out * ww.out * oc), rng));
    const HostLoad lx{x.data()}, ldy{dy.data()};
    ref::Vec y, dx, y_nodil;
    for (int64_t i = 0; i < k.n * wh.out * ww.out * oc; ++i) {
      y.push_back(depthwise_math::forward_at(s, lx, w.data(), k.bias ? b.data() : nullptr, i));
      depthwise_math::DwShape wrong = s;  // dilation ignored
      wrong.dh = wrong.dw = 1;
      y_nodil.push_back(depthwise_math::forward_at(wrong, lx, w.data(), k.bias ? b.data() : nullptr, i));
    }
    for (int64_t i = 0; i < k.n * k.h * k.w * k.c; ++i)
      dx.push_back(depthwise_math::backward_data_at(s, ldy, w.data(), i));
    // The GPU kernels' 32-bit index math (shapes under 2^30 elements) gives the same bits.
    ref::Vec y32, dx32;
    for (int32_t i = 0; i < int32_t(k.n * wh.out * ww.out * oc); ++i)
      y32.push_back(depthwise_math::forward_at(s, lx, w.data(), k.bias ? b.data() : nullptr, i));
    for (int32_t i = 0; i < int32_t(k.n * k.h * k.w * k.c); ++i)
      dx32.push_back(depthwise_math::backward_data_at(s, ldy, w.data(), i));
    CHECK(y32 == y);
    CHECK(dx32 == dx);
    const double taps = k.kh * k.kw;
    const ref::Vec vb = to_doubles(b), ab = abs_of(b);
    const ref::Vec want_y = ref::depthwise_conv2d_forward(d, to_doubles(x), to_doubles(w), k.bias ? &vb : nullptr);
    const ref::Vec mag_y = ref::depthwise_conv2d_forward(d, abs_of(x), abs_of(w), k.bias ? &ab : nullptr);
    const double ey = bound_ratio(y, want_y, mag_y, taps + 2), ebad = bound_ratio(y_nodil, want_y, mag_y, taps + 2);
    INFO("y: error / bound " << ey << ", dilation ignored " << ebad);
    CHECK(ey <= 1);
    if (y_nodil != y) CHECK(ebad > 1);  // where the dilation changes some window
    ref::Vec rdx, rdw, rdb, mdx, mdw, mdb;
    ref::depthwise_conv2d_backward(d, to_doubles(x), to_doubles(w), to_doubles(dy), rdx, rdw, rdb);
    ref::depthwise_conv2d_backward(d, abs_of(x), abs_of(w), abs_of(dy), mdx, mdw, mdb);
    const double edx = bound_ratio(dx, rdx, mdx, k.m * taps + 1);
    INFO("dx: error / bound " << edx);
    CHECK(edx <= 1);
    // The filter gradient: the kernels' chunks, partials, then the fixed-order sum.
    const int64_t rows = k.n * wh.out * ww.out;
    if (rows == 0) continue;  // the kernel writes zeros without these passes
    int64_t chunks = 0, per = 0;
    depthwise_math::filter_chunks(rows, chunks, per);
    REQUIRE(chunks >= 1);
    CHECK((chunks - 1) * per < rows);  // no empty chunk
    CHECK(chunks * per >= rows);       // every row in one
    const int slots = k.kh * k.kw + (k.bias ? 1 : 0);
    const int64_t per_chunk = int64_t(slots) * oc;
    std::vector<float> partial(size_t(chunks * per_chunk));
    for (int64_t i = 0; i < chunks * per_chunk; ++i)
      partial[i] = depthwise_math::filter_partial_at(s, lx, ldy, slots, per, i);
    bool same32 = true;
    for (int32_t i = 0; i < int32_t(chunks * per_chunk); ++i)
      same32 = same32 && depthwise_math::filter_partial_at(s, lx, ldy, slots, per, i) == partial[size_t(i)];
    CHECK(same32);
    ref::Vec dw, db;
    for (int64_t i = 0; i < per_chunk; ++i) {
      const float v = depthwise_math::filter_sum_at(partial.data(), chunks, per_chunk, i);
      if (i < int64_t(k.kh * k.kw) * oc) dw.push_back(v);
      else db.push_back(v);
    }
    const double edw = bound_ratio(dw, rdw, mdw, double(per + chunks + 1));
    const double edb = k.bias ? bound_ratio(db, rdb, mdb, double(per + chunks + 1)) : 0.0;
    INFO("dw: error / bound " << edw << ", db " << edb);
    CHECK(edw <= 1);
    CHECK(edb <= 1);
  }
}
