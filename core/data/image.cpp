// Image helpers: format sniffing, the JPEG/PNG dispatching decoder and antialiased bilinear resizing.
#include "core/data/image.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/data/dataset.h"
#include "core/data/util.h"

namespace trainer {

namespace {

// Filter taps for one axis: for output i, weights over input [first[i], first[i] + count[i]).
struct Taps {
  std::vector<int> first, count;
  std::vector<float> weights;  // out_size * max_taps
  int max_taps = 0;
};

Taps make_taps(int in, int out) {
  Taps t;
  const double scale = double(in) / out, fscale = std::max(scale, 1.0), support = fscale;
  t.max_taps = int(std::ceil(support)) * 2 + 1;
  t.first.resize(size_t(out));
  t.count.resize(size_t(out));
  t.weights.assign(size_t(out) * size_t(t.max_taps), 0.f);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    int lo = std::max(int(center - support + 0.5), 0);
    int hi = std::min(int(center + support + 0.5), in);
    hi = std::min(hi, lo + t.max_taps);
    double total = 0;
    float* w = &t.weights[size_t(i) * size_t(t.max_taps)];
    for (int x = lo; x < hi; ++x) {
      double d = std::abs((x + 0.5 - center) / fscale);
      double v = d < 1.0 ? 1.0 - d : 0.0;
      w[x - lo] = float(v);
      total += v;
    }
    if (total <= 0) {  // cannot happen for sane sizes; fall back to nearest
      lo = std::clamp(int(center), 0, in - 1), hi = lo + 1, w[0] = 1.f, total = 1;
    }
    for (int x = lo; x < hi; ++x) w[x - lo] = float(w[x - lo] / total);
    t.first[size_t(i)] = lo;
    t.count[size_t(i)] = hi - lo;
  }
  return t;
}

std::string first_bytes(const uint8_t* data, size_t size) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) s += fmt::format("{}{:02x}", i ? " " : "", data[i]);
  return s;
}

}  // namespace

ImageFormat sniff_image(const uint8_t* data, size_t size) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::Jpeg;
  if (size >= 8 && std::memcmp(data, png_sig, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

namespace {

[[noreturn]] void not_an_image(const uint8_t* data, size_t size, const std::string& what) {
  if (size == 0) throw DataError(fmt::format("{}: empty file (0 bytes), not an image", what));
  throw DataError(fmt::format("{}: not a JPEG or PNG file (first bytes {})", what, first_bytes(data, size)));
}

}  // namespace

void ImageDecoder::header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width) {
  switch (sniff_image(data, size)) {
    case ImageFormat::Jpeg: jpeg_.header(data, size, what, height, width); break;
    case ImageFormat::Png: png_header(data, size, what, height, width); break;
    case ImageFormat::Unknown: not_an_image(data, size, what);
  }
  const uint64_t bytes = uint64_t(height) * uint64_t(width) * 3;
  if (bytes > max_bytes_)
    throw DataError(fmt::format("{}: image is {}x{} (HxW), {} decoded, more than data.max_image_mb ({})", what, height,
                                width, data_util::format_bytes(bytes), max_bytes_ >> 20));
}

void ImageDecoder::decode_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height,
                              int width) {
  switch (sniff_image(data, size)) {
    case ImageFormat::Jpeg: return jpeg_.decode_rgb(data, size, what, rgb, height, width);
    case ImageFormat::Png: return decode_png_rgb(data, size, what, rgb, height, width);
    case ImageFormat::Unknown: break;
  }
  not_an_image(data, size, what);
}

void ImageDecoder::decode_rgb_resized(const uint8_t* data, size_t size, const std::string& what, uint8_t* out,
                                      int out_h, int out_w) {
  int h = 0, w = 0;
  header(data, size, what, h, w);
  if (h == out_h && w == out_w) return decode_rgb(data, size, what, out, h, w);
  full_.resize(size_t(h) * size_t(w) * 3);
  decode_rgb(data, size, what, full_.data(), h, w);
  resize_bilinear(full_.data(), h, w, 3, out, out_h, out_w);
}

void resize_bilinear(const uint8_t* src, int src_h, int src_w, int channels, uint8_t* dst, int dst_h, int dst_w) {
  if (src_h <= 0 || src_w <= 0 || dst_h <= 0 || dst_w <= 0 || channels <= 0)
    throw std::invalid_argument("resize_bilinear: empty image");
  const size_t C = size_t(channels);
  const Taps tx = make_taps(src_w, dst_w), ty = make_taps(src_h, dst_h);
  // Horizontal pass into float rows (src_h x dst_w), then vertical pass with rounding.
  std::vector<float> tmp(size_t(src_h) * size_t(dst_w) * C);
  for (int y = 0; y < src_h; ++y) {
    const uint8_t* row = src + size_t(y) * size_t(src_w) * C;
    float* out = &tmp[size_t(y) * size_t(dst_w) * C];
    for (int x = 0; x < dst_w; ++x) {
      const float* w = &tx.weights[size_t(x) * size_t(tx.max_taps)];
      const uint8_t* s = row + size_t(tx.first[size_t(x)]) * C;
      for (size_t c = 0; c < C; ++c) {
        float acc = 0;
        for (int k = 0; k < tx.count[size_t(x)]; ++k) acc += w[k] * s[size_t(k) * C + c];
        out[size_t(x) * C + c] = acc;
      }
    }
  }
  // Rows of the output accumulate tap by tap (contiguous, so the loops vectorise); the weights
  // are non-negative and sum to 1, so the sums lie in [0, 255] and round by adding 0.5.
  const size_t row_len = size_t(dst_w) * C;
  std::vector<float> acc(row_len);
  for (int y = 0; y < dst_h; ++y) {
    const float* w = &ty.weights[size_t(y) * size_t(ty.max_taps)];
    const float* s = &tmp[size_t(ty.first[size_t(y)]) * row_len];
    const float w0 = w[0];
    for (size_t i = 0; i < row_len; ++i) acc[i] = w0 * s[i];
    for (int k = 1; k < ty.count[size_t(y)]; ++k) {
      const float wk = w[k];
      const float* sk = s + size_t(k) * row_len;
      for (size_t i = 0; i < row_len; ++i) acc[i] += wk * sk[i];
    }
    uint8_t* out = dst + size_t(y) * row_len;
    for (size_t i = 0; i < row_len; ++i) out[i] = uint8_t(int(std::clamp(acc[i] + 0.5f, 0.f, 255.f)));
  }
}

}  // namespace trainer
