// Augmentation and normalisation of samples: parsing the augment section, statistics, the transform.
#include "core/data/transforms.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "core/data/util.h"

namespace trainer {

namespace {

bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

// A number or "a/b" (e.g. 1/255, which YAML would otherwise read as a string).
double number_or_fraction(const cfg::Node& n) {
  std::string s = n.scalar();
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  double v = 0, a = 0, b = 0;
  if (parse_number(s, v)) return v;
  size_t slash = s.find('/');
  if (slash != std::string::npos && parse_number(s.substr(0, slash), a) && parse_number(s.substr(slash + 1), b) &&
      b != 0)
    return a / b;
  n.fail(fmt::format("'{}' must be a number or a fraction such as 1/255, not '{}'", n.path(), n.scalar()));
}

}  // namespace

Augment parse_augment(cfg::MapReader& r) {
  Augment a;
  a.shift = float(r.get_float("shift", 0.0, 0.0, 0.99));
  std::string flip = r.get_choice("flip", {"none", "horizontal", "vertical", "both"}, "none");
  a.flip_horizontal = flip == "horizontal" || flip == "both";
  a.flip_vertical = flip == "vertical" || flip == "both";
  if (cfg::Node m = r.optional("mean"); m.defined()) {
    double v = 0;
    std::string s = m.scalar();
    const std::vector<std::string> kinds = {"none", "per_pixel", "per_channel"};
    if (parse_number(s, v)) {
      a.mean = Augment::Mean::Constant, a.mean_value = float(v);
    } else if (s == "none") {
      a.mean = Augment::Mean::None;
    } else if (s == "per_pixel") {
      a.mean = Augment::Mean::PerPixel;
    } else if (s == "per_channel") {
      a.mean = Augment::Mean::PerChannel;
    } else {
      m.fail(fmt::format("'{}' is not a valid mean for {}{}; valid: none, per_pixel, per_channel or a number", s,
                         r.what(), cfg::suggestion(s, kinds)));
    }
  }
  if (cfg::Node s = r.optional("scale"); s.defined()) {
    double v = number_or_fraction(s);
    if (!(v > 0)) s.fail(fmt::format("'{}' must be positive", s.path()));
    a.scale = float(v);
  }
  return a;
}

Augment parse_augment(const cfg::Node& section) {
  cfg::MapReader r(section, section.path().empty() ? "augment" : section.path());
  Augment a = parse_augment(r);
  r.finish();
  return a;
}

NormStats compute_stats(const Dataset& ds, Augment::Mean kind, int threads) {
  NormStats st;
  st.kind = kind;
  st.shape = ds.sample_shape();
  if (kind != Augment::Mean::PerPixel && kind != Augment::Mean::PerChannel) return st;
  const int64_t n = ds.size();
  if (n <= 0) throw DataError(fmt::format("{}: no samples to compute the mean over", ds.describe()));
  const size_t elems = size_t(st.shape.numel()), C = size_t(st.shape[2]);
  if (threads <= 0) threads = data_util::default_threads(8);
  threads = int(std::clamp<int64_t>(threads, 1, n));
  // Integer sums are exact, so the result does not depend on how samples are split over threads.
  const bool per_pixel = kind == Augment::Mean::PerPixel;
  std::vector<std::vector<uint64_t>> sum(size_t(threads), std::vector<uint64_t>(per_pixel ? elems : C, 0));
  std::vector<std::vector<uint64_t>> sq(size_t(threads), std::vector<uint64_t>(per_pixel ? 0 : C, 0));
  data_util::parallel_for(threads, threads, [&](int64_t t) {
    std::vector<uint8_t> px(elems);
    auto& s = sum[size_t(t)];
    auto& q = sq[size_t(t)];
    for (int64_t i = n * t / threads, end = n * (t + 1) / threads; i < end; ++i) {
      ds.get(i, px.data());
      if (per_pixel) {
        for (size_t e = 0; e < elems; ++e) s[e] += px[e];
      } else {
        for (size_t e = 0; e < elems; ++e) s[e % C] += px[e], q[e % C] += uint64_t(px[e]) * px[e];
      }
    }
  }, 1);
  const size_t len = per_pixel ? elems : C;
  const double count = per_pixel ? double(n) : double(n) * double(elems / C);
  st.mean.assign(len, 0.f);
  for (size_t e = 0; e < len; ++e) {
    uint64_t total = 0;
    for (int t = 0; t < threads; ++t) total += sum[size_t(t)][e];
    st.mean[e] = float(double(total) / count);
  }
  if (!per_pixel) {
    st.inv_std.assign(C, 1.f);
    for (size_t c = 0; c < C; ++c) {
      uint64_t total = 0, total_sq = 0;
      for (int t = 0; t < threads; ++t) total += sum[size_t(t)][c], total_sq += sq[size_t(t)][c];
      double m = double(total) / count, var = std::max(0.0, double(total_sq) / count - m * m);
      st.inv_std[c] = float(1.0 / std::max(std::sqrt(var), 1e-6));
    }
  }
  return st;
}

SampleTransform::SampleTransform(const Augment& a, const Shape& shape, std::shared_ptr<const NormStats> stats)
    : aug_(a) {
  if (shape.rank() != 3) throw std::invalid_argument("SampleTransform: sample shape must be H, W, C");
  h_ = int(shape[0]), w_ = int(shape[1]), c_ = int(shape[2]);
  const size_t elems = size_t(shape.numel());
  sub_.assign(elems, 0.f);
  mul_.assign(elems, a.scale);
  switch (a.mean) {
    case Augment::Mean::None: break;
    case Augment::Mean::Constant: std::fill(sub_.begin(), sub_.end(), a.mean_value); break;
    case Augment::Mean::PerPixel:
    case Augment::Mean::PerChannel: {
      const bool per_pixel = a.mean == Augment::Mean::PerPixel;
      if (!stats || stats->kind != a.mean)
        throw std::invalid_argument(fmt::format("augment mean: {} needs statistics computed by compute_stats",
                                                per_pixel ? "per_pixel" : "per_channel"));
      if (stats->shape != shape)
        throw DataError(fmt::format("the mean was computed over {} samples, but these samples are {}",
                                    stats->shape.str(), shape.str()));
      for (size_t e = 0; e < elems; ++e) {
        sub_[e] = per_pixel ? stats->mean[e] : stats->mean[e % size_t(c_)];
        if (!per_pixel) mul_[e] = a.scale * stats->inv_std[e % size_t(c_)];
      }
      break;
    }
  }
}

RandomParams SampleTransform::draw(Rng& rng) const {
  RandomParams p;
  if (aug_.flip_horizontal) p.flip_h = rng.coin();
  if (aug_.flip_vertical) p.flip_v = rng.coin();
  if (aug_.shift > 0) {
    const int max_dy = int(std::floor(aug_.shift * h_)), max_dx = int(std::floor(aug_.shift * w_));
    p.dy = int(rng.uniform_int(-max_dy, max_dy));
    p.dx = int(rng.uniform_int(-max_dx, max_dx));
  }
  return p;
}

void SampleTransform::apply(const uint8_t* src, float* dst, const RandomParams& p) const {
  // Source column and row of every destination column and row.
  thread_local std::vector<int> cols, rows;
  cols.resize(size_t(w_));
  rows.resize(size_t(h_));
  // Flip first, then shift: (dy, dx) is how far the content moves in the output either way.
  for (int x = 0; x < w_; ++x) {
    int sx = std::clamp(x - p.dx, 0, w_ - 1);
    cols[size_t(x)] = p.flip_h ? w_ - 1 - sx : sx;
  }
  for (int y = 0; y < h_; ++y) {
    int sy = std::clamp(y - p.dy, 0, h_ - 1);
    rows[size_t(y)] = p.flip_v ? h_ - 1 - sy : sy;
  }
  const size_t C = size_t(c_), row_len = size_t(w_) * C;
  for (int y = 0; y < h_; ++y) {
    const uint8_t* srow = src + size_t(rows[size_t(y)]) * row_len;
    const size_t o = size_t(y) * row_len;
    float* d = dst + o;
    const float* sub = sub_.data() + o;
    const float* mul = mul_.data() + o;
    for (int x = 0; x < w_; ++x) {
      const uint8_t* s = srow + size_t(cols[size_t(x)]) * C;
      for (size_t c = 0; c < C; ++c) {
        const size_t e = size_t(x) * C + c;
        d[e] = (float(s[c]) - sub[e]) * mul[e];
      }
    }
  }
}

}  // namespace trainer
