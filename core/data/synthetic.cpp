// `type: synthetic`: ten procedurally drawn classes of shapes and textures, each sample a pure
// function of (seed, index) — deterministic, thread-safe, no storage, and learnable by a small CNN.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/data/dataset.h"
#include "core/data/random.h"

namespace trainer {

namespace {

// Keys (all optional):
//   size: 10000          samples
//   image_size: 32       [H, W] or one int
//   channels: 3          1..4
//   classes: 10          1..10 (the first `classes` of the list below)
//   seed: 0              give the validation set a different seed from the training set
//   noise: 0.1           std-dev of Gaussian pixel noise, in units of the full 0..255 range
// Labels are index % classes (balanced; the loader shuffles). Foreground and background colours,
// position, size, orientation and texture scale are random per sample and independent of the
// class, so the class is told by shape, not by colour.
const std::array<const char*, 10> kClassNames = {"circle",  "square",     "triangle",   "ring",    "cross",
                                                 "hstripes", "vstripes", "dstripes", "checkerboard", "dots"};
constexpr uint64_t kTag = 0x5eed5a3b1e000001ULL;

struct Params {
  int64_t size = 10000;
  int height = 32, width = 32, channels = 3, classes = 10;
  uint64_t seed = 0;
  double noise = 0.1;
};

// Everything random about one sample's geometry, drawn before any pixel.
struct Scene {
  int cls = 0;
  double cx = 0, cy = 0, r = 0;       // shape centre and radius (shapes), patch half-size (textures)
  int orient = 0;                     // triangle direction 0..3; cross: 0 plus, 1 x; diagonal sign
  double period = 4, phase = 0;       // textures
};

// Whether point (x, y), in pixel units, is "ink" (foreground colour) in this scene.
bool inside(const Scene& s, double x, double y) {
  double dx = x - s.cx, dy = y - s.cy;
  switch (s.cls) {
    case 0: return dx * dx + dy * dy <= s.r * s.r;  // filled circle
    case 1: return std::abs(dx) <= 0.85 * s.r && std::abs(dy) <= 0.85 * s.r;  // filled square
    case 2: {  // filled triangle pointing up/down/left/right
      double u = dx, v = dy;
      if (s.orient == 1) v = -dy;
      if (s.orient == 2) u = dy, v = dx;
      if (s.orient == 3) u = dy, v = -dx;
      return v >= -s.r && v <= 0.75 * s.r && std::abs(u) <= (v + s.r) * 0.62;
    }
    case 3: {  // ring
      double d2 = dx * dx + dy * dy;
      return d2 <= s.r * s.r && d2 >= 0.3 * s.r * s.r;
    }
    case 4: {  // plus or x
      double u = dx, v = dy;
      if (s.orient == 1) u = (dx + dy) * 0.7071067811865476, v = (dx - dy) * 0.7071067811865476;
      double t = 0.3 * s.r;
      return (std::abs(u) <= t && std::abs(v) <= s.r) || (std::abs(v) <= t && std::abs(u) <= s.r);
    }
    default: break;
  }
  // Textures fill a square patch of half-size r.
  if (std::abs(dx) > s.r || std::abs(dy) > s.r) return false;
  auto band = [&](double t) {  // first half of each period is ink
    double m = std::fmod(t + s.phase, s.period);
    if (m < 0) m += s.period;
    return m < 0.5 * s.period;
  };
  switch (s.cls) {
    case 5: return band(y);                                           // horizontal stripes
    case 6: return band(x);                                           // vertical stripes
    case 7: return band((s.orient ? x + y : x - y) * 0.7071067811865476);  // diagonal stripes
    case 8: {                                                         // checkerboard
      double c = 0.5 * s.period;
      return (int64_t(std::floor((x + s.phase) / c)) + int64_t(std::floor((y + s.phase) / c))) % 2 == 0;
    }
    case 9: {  // a grid of dots
      double gx = std::fmod(x + s.phase, s.period), gy = std::fmod(y + s.phase, s.period);
      if (gx < 0) gx += s.period;
      if (gy < 0) gy += s.period;
      gx -= 0.5 * s.period, gy -= 0.5 * s.period;
      double rd = 0.27 * s.period;
      return gx * gx + gy * gy <= rd * rd;
    }
    default: return false;
  }
}

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(Params p) : p_(p) {}
  int64_t size() const override { return p_.size; }
  Shape sample_shape() const override { return Shape{p_.height, p_.width, p_.channels}; }
  int num_classes() const override { return p_.classes; }
  std::vector<std::string> class_names() const override {
    return std::vector<std::string>(kClassNames.begin(), kClassNames.begin() + p_.classes);
  }
  std::string describe() const override {
    return fmt::format("synthetic: {} images {}x{}x{}, {} classes (seed {}, noise {})", p_.size, p_.height,
                       p_.width, p_.channels, p_.classes, p_.seed, p_.noise);
  }

  int32_t get(int64_t index, uint8_t* pixels) const override {
    const int H = p_.height, W = p_.width, C = p_.channels;
    Rng rng{kTag, p_.seed, uint64_t(index)};
    Scene s;
    s.cls = int(index % p_.classes);
    const double S = std::min(H, W), k = S / 32.0;  // texture scale follows image size
    if (s.cls < 5) {
      s.r = rng.uniform(0.18, 0.32) * S;
      s.cx = rng.uniform(0.3, 0.7) * W;
      s.cy = rng.uniform(0.3, 0.7) * H;
    } else {
      s.r = rng.uniform(0.28, 0.42) * S;
      s.cx = rng.uniform(0.35, 0.65) * W;
      s.cy = rng.uniform(0.35, 0.65) * H;
      s.period = std::max(2.0, (s.cls == 8 ? rng.uniform(5.0, 8.0) : rng.uniform(4.0, 7.0)) * k);
      s.phase = rng.uniform(0.0, s.period);
    }
    s.orient = int(rng.uniform_int(0, 3));
    if (s.cls == 4 || s.cls == 7) s.orient &= 1;

    // Colours: uniform, redrawn until foreground and background differ clearly in brightness.
    std::array<double, 4> fg{}, bg{};
    for (int attempt = 0;; ++attempt) {
      for (int c = 0; c < C; ++c) fg[size_t(c)] = rng.uniform(), bg[size_t(c)] = rng.uniform();
      double diff = 0;
      if (C == 3) {
        diff = 0.299 * (fg[0] - bg[0]) + 0.587 * (fg[1] - bg[1]) + 0.114 * (fg[2] - bg[2]);
      } else {
        for (int c = 0; c < C; ++c) diff += (fg[size_t(c)] - bg[size_t(c)]) / C;
      }
      if (std::abs(diff) >= 0.25) break;
      if (attempt == 16) {  // rare: fall back to the complement
        for (int c = 0; c < C; ++c) fg[size_t(c)] = bg[size_t(c)] < 0.5 ? 0.9 : 0.1;
        break;
      }
    }

    // 2x2 supersampling for clean edges; then noise, clamp, quantise.
    static constexpr double kSub[2] = {0.25, 0.75};
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        int hits = 0;
        for (double sy : kSub)
          for (double sx : kSub) hits += inside(s, x + sx, y + sy);
        double cover = hits * 0.25;
        uint8_t* px = pixels + (size_t(y) * W + x) * C;
        for (int c = 0; c < C; ++c) {
          double v = bg[size_t(c)] + cover * (fg[size_t(c)] - bg[size_t(c)]);
          if (p_.noise > 0) v += p_.noise * rng.normal();
          px[c] = uint8_t(std::lround(std::clamp(v, 0.0, 1.0) * 255.0));
        }
      }
    }
    return int32_t(s.cls);
  }

 private:
  Params p_;
};

std::shared_ptr<Dataset> make_synthetic(cfg::MapReader& r, const DatasetContext& /*ctx*/) {
  r.allow({"size", "image_size", "channels", "classes", "seed", "noise"});
  r.finish();  // unknown keys first, so a typo is named before any other complaint
  Params p;
  p.size = r.get_int("size", 10000, 1, int64_t(1) << 40);
  auto [h, w] = r.get_pair("image_size", std::pair<int, int>{32, 32});
  if (h < 4 || w < 4 || h > 4096 || w > 4096) r.optional("image_size").fail("'image_size' must be between 4 and 4096");
  p.height = h, p.width = w;
  p.channels = int(r.get_int("channels", 3, 1, 4));
  p.classes = int(r.get_int("classes", 10, 1, 10));
  p.seed = uint64_t(r.get_int("seed", 0, 0, INT64_MAX));
  p.noise = r.get_float("noise", 0.1, 0.0, 1.0);
  return std::make_shared<SyntheticDataset>(p);
}

const bool registered = (register_dataset("synthetic", make_synthetic), true);

}  // namespace

}  // namespace trainer
