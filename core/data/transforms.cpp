// Augmentation and normalisation of samples: parsing the augment section and the per-sample transform.
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

Augment::Fill read_fill(cfg::MapReader& r, const std::string& key, const std::vector<std::string>& names,
                        const std::vector<Augment::Fill>& modes, const std::string& fallback) {
  const std::string s = r.get_choice(key, names, fallback);
  return modes[size_t(std::find(names.begin(), names.end(), s) - names.begin())];
}

Augment::Crop parse_crop(const cfg::Node& node) {
  cfg::MapReader r(node, node.path());
  Augment::Crop c;
  std::pair<int, int> size = r.get_pair("size", std::nullopt);
  if (size.first < 1 || size.second < 1 || size.first > 8192 || size.second > 8192)
    r.required("size").fail(fmt::format("'{}.size' must be between 1 and 8192", node.path()));
  c.height = size.first, c.width = size.second;
  c.padding = int(r.get_int("padding", 0, 0, 4096));
  c.padding_mode = read_fill(r, "padding_mode", {"constant", "edge", "reflect", "symmetric"},
                             {Augment::Fill::Constant, Augment::Fill::Nearest, Augment::Fill::Reflect101,
                              Augment::Fill::Reflect}, "constant");
  c.fill = float(r.get_float("fill", 0.0, 0.0, 255.0));
  r.finish();
  return c;
}

}  // namespace

Augment parse_augment(cfg::MapReader& r) {
  Augment a;
  a.shift = float(r.get_float("shift", 0.0, 0.0, 0.99));
  a.fill_mode = read_fill(r, "fill_mode", {"nearest", "reflect", "wrap", "constant"},
                          {Augment::Fill::Nearest, Augment::Fill::Reflect, Augment::Fill::Wrap, Augment::Fill::Constant},
                          "nearest");
  a.fill_value = float(r.get_float("fill_value", 0.0, 0.0, 255.0));
  std::string flip = r.get_choice("flip", {"none", "horizontal", "vertical", "both"}, "none");
  a.flip_horizontal = flip == "horizontal" || flip == "both";
  a.flip_vertical = flip == "vertical" || flip == "both";
  if (cfg::Node c = r.optional("crop"); c.defined()) a.crop = parse_crop(c);
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
    // per_channel divides by each channel's deviation, which cancels a scale applied before it
    // (Keras's rescale before featurewise_std_normalization, torchvision's ToTensor before
    // Normalize): after it, as here, 1/255 would make inputs 255 times smaller than theirs.
    if (a.mean == Augment::Mean::PerChannel && v != 1.0)
      s.fail(fmt::format("'{}' with mean: per_channel: the division by each channel's standard deviation already "
                         "gives unit variance, and a scale (Keras's rescale, ToTensor's 1/255) would cancel in it; "
                         "remove scale",
                         s.path()));
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

namespace {

constexpr int kShiftFill = -1, kCropFill = -2;  // axis map entries for constant fills

int mod(int a, int n) {
  const int m = a % n;
  return m < 0 ? m + n : m;
}

// Index i of an axis of n pixels, resolved per `mode` when outside [0, n); -1 for Constant.
int fill_index(int i, int n, Augment::Fill mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case Augment::Fill::Nearest: return std::clamp(i, 0, n - 1);
    case Augment::Fill::Reflect: {
      const int k = mod(i, 2 * n);
      return k < n ? k : 2 * n - 1 - k;
    }
    case Augment::Fill::Reflect101: {
      if (n == 1) return 0;
      const int k = mod(i, 2 * n - 2);
      return k < n ? k : 2 * n - 2 - k;
    }
    case Augment::Fill::Wrap: return mod(i, n);
    case Augment::Fill::Constant: break;
  }
  return -1;
}

// Source index for every output position of one axis: undo the shift (output axis, fill_mode),
// the flip, then the crop offset (source axis, padding_mode).
void axis_map(std::vector<int>& map, int out_n, int src_n, int shift, bool flip, int offset, Augment::Fill shift_fill,
              Augment::Fill crop_fill) {
  map.resize(size_t(out_n));
  for (int i = 0; i < out_n; ++i) {
    int j = fill_index(i - shift, out_n, shift_fill);
    if (j < 0) {
      map[size_t(i)] = kShiftFill;
      continue;
    }
    if (flip) j = out_n - 1 - j;
    const int k = fill_index(j + offset, src_n, crop_fill);
    map[size_t(i)] = k < 0 ? kCropFill : k;
  }
}

// torchvision CenterCrop's offset: round((src - out) / 2) with Python's half-to-even rounding,
// or, for a crop larger than the image, minus the zero padding on the leading side.
int center_offset(int src, int out) {
  if (src < out) return -((out - src) / 2);
  const int d = src - out;
  int h = d / 2;
  if (d % 2 == 1 && h % 2 == 1) ++h;
  return h;
}

}  // namespace

SampleTransform::SampleTransform(const Augment& a, const Shape& shape, std::shared_ptr<const NormStats> stats)
    : aug_(a) {
  if (shape.rank() != 3) throw std::invalid_argument("SampleTransform: sample shape must be H, W, C");
  in_ = shape;
  out_ = a.output_shape(shape);
  const int H = int(in_[0]), W = int(in_[1]), C = int(in_[2]);
  const Augment::Crop& crop = a.crop;
  if (crop.enabled()) {
    if (!crop.center && (crop.height > H + 2 * crop.padding || crop.width > W + 2 * crop.padding))
      throw DataError(fmt::format("augment crop: size {}x{} is larger than the padded image {}x{} ({}x{} padded by {})",
                                  crop.height, crop.width, H + 2 * crop.padding, W + 2 * crop.padding, H, W,
                                  crop.padding));
    center_top_ = center_offset(H, crop.height);
    center_left_ = center_offset(W, crop.width);
  }
  const size_t elems = size_t(out_.numel());
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
      if (per_pixel && out_ != in_)
        throw DataError(fmt::format("augment: mean: per_pixel needs the crop size to equal the image size ({}x{}), "
                                    "not {}x{}; use mean: per_channel with a crop of another size",
                                    H, W, crop.height, crop.width));
      const bool fits = per_pixel ? stats->shape == shape
                                  : stats->shape.rank() == 3 && stats->shape[2] == C && stats->mean.size() == size_t(C);
      if (!fits)
        throw DataError(fmt::format("the mean was computed over {} samples, but these samples are {}",
                                    stats->shape.str(), shape.str()));
      for (size_t e = 0; e < elems; ++e) {
        sub_[e] = per_pixel ? stats->mean[e] : stats->mean[e % size_t(C)];
        if (!per_pixel) mul_[e] = a.scale * (1.0f / stats->stddev[e % size_t(C)]);
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
    const int max_dy = int(std::floor(aug_.shift * float(out_[0]))), max_dx = int(std::floor(aug_.shift * float(out_[1])));
    p.dy = int(rng.uniform_int(-max_dy, max_dy));
    p.dx = int(rng.uniform_int(-max_dx, max_dx));
  }
  if (aug_.crop.enabled() && !aug_.crop.center) {
    p.crop_top = int(rng.uniform_int(0, in_[0] + 2 * aug_.crop.padding - aug_.crop.height));
    p.crop_left = int(rng.uniform_int(0, in_[1] + 2 * aug_.crop.padding - aug_.crop.width));
  }
  return p;
}

void SampleTransform::apply(const uint8_t* src, float* dst, const RandomParams& p) const {
  const int oh = int(out_[0]), ow = int(out_[1]), H = int(in_[0]), W = int(in_[1]);
  const Augment::Crop& crop = aug_.crop;
  int top = 0, left = 0;
  Augment::Fill crop_fill = Augment::Fill::Constant;
  if (crop.enabled()) {
    top = crop.center ? center_top_ : p.crop_top - crop.padding;
    left = crop.center ? center_left_ : p.crop_left - crop.padding;
    if (!crop.center) crop_fill = crop.padding_mode;
  }
  thread_local std::vector<int> cols, rows;
  axis_map(rows, oh, H, p.dy, p.flip_v, top, aug_.fill_mode, crop_fill);
  axis_map(cols, ow, W, p.dx, p.flip_h, left, aug_.fill_mode, crop_fill);
  const size_t C = size_t(out_[2]), in_row = size_t(W) * C, out_row = size_t(ow) * C;
  // Gather each output row's source pixels (or fill values) into a float line, then normalise
  // the line in one contiguous (vectorised) pass.
  thread_local std::vector<float> line;
  line.resize(out_row);
  for (int y = 0; y < oh; ++y) {
    const int r = rows[size_t(y)];
    if (r >= 0) {
      const uint8_t* srow = src + size_t(r) * in_row;
      for (int x = 0; x < ow; ++x) {
        const int c = cols[size_t(x)];
        float* l = &line[size_t(x) * C];
        if (c >= 0) {
          const uint8_t* s = srow + size_t(c) * C;
          for (size_t ch = 0; ch < C; ++ch) l[ch] = float(s[ch]);
        } else {
          std::fill(l, l + C, c == kShiftFill ? aug_.fill_value : crop.fill);
        }
      }
    } else {
      // The shift is applied last, so its fill covers the crop's.
      std::fill(line.begin(), line.end(), r == kShiftFill ? aug_.fill_value : crop.fill);
      for (int x = 0; x < ow; ++x)
        if (cols[size_t(x)] == kShiftFill) std::fill_n(&line[size_t(x) * C], C, aug_.fill_value);
    }
    const size_t o = size_t(y) * out_row;
    float* d = dst + o;
    const float* sub = sub_.data() + o;
    const float* mul = mul_.data() + o;
    const float* l = line.data();
    for (size_t i = 0; i < out_row; ++i) d[i] = (l[i] - sub[i]) * mul[i];
  }
}

}  // namespace trainer
