// Image helpers for the readers: JPEG decoding to RGB (libturbojpeg) and antialiased bilinear resizing.
#include "core/data/image.h"

#include <fmt/format.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/data/dataset.h"

namespace trainer {

namespace {

[[noreturn]] void jpeg_fail(tjhandle h, const std::string& what) {
  std::string msg = tjGetErrorStr2(h);
  throw DataError(fmt::format("{}: cannot decode JPEG: {}", what, msg));
}

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

}  // namespace

JpegDecoder::JpegDecoder() : handle_(tjInitDecompress()) {
  if (!handle_) throw std::runtime_error(std::string("tjInitDecompress failed: ") + tjGetErrorStr2(nullptr));
}

JpegDecoder::~JpegDecoder() { tjDestroy(static_cast<tjhandle>(handle_)); }

void JpegDecoder::header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width) {
  auto h = static_cast<tjhandle>(handle_);
  int subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &width, &height, &subsamp, &colorspace) != 0)
    jpeg_fail(h, what);
  if (width <= 0 || height <= 0) throw DataError(fmt::format("{}: JPEG has no pixels ({}x{})", what, width, height));
}

void JpegDecoder::decode_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height,
                             int width) {
  auto h = static_cast<tjhandle>(handle_);
  int w = 0, hh = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &w, &hh, &subsamp, &colorspace) != 0)
    jpeg_fail(h, what);
  if (w != width || hh != height)
    throw std::logic_error(fmt::format("{}: decode_rgb asked for {}x{}, file is {}x{}", what, height, width, hh, w));
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    // libjpeg cannot convert CMYK to RGB itself. Photoshop (Adobe) CMYK JPEGs store inverted
    // values, so R = C * K / 255 (as PIL does).
    scratch_.resize(size_t(width) * size_t(height) * 4);
    if (tjDecompress2(h, data, static_cast<unsigned long>(size), scratch_.data(), width, 0, height, TJPF_CMYK, 0) != 0)
      jpeg_fail(h, what);
    for (size_t p = 0, n = size_t(width) * size_t(height); p < n; ++p) {
      const uint8_t* s = &scratch_[p * 4];
      for (int c = 0; c < 3; ++c) rgb[p * 3 + size_t(c)] = uint8_t((s[c] * s[3] + 127) / 255);
    }
    return;
  }
  if (tjDecompress2(h, data, static_cast<unsigned long>(size), rgb, width, 0, height, TJPF_RGB, 0) != 0)
    jpeg_fail(h, what);
}

void JpegDecoder::decode_rgb_resized(const uint8_t* data, size_t size, const std::string& what, uint8_t* out,
                                     int out_h, int out_w) {
  int h = 0, w = 0;
  header(data, size, what, h, w);
  if (h == out_h && w == out_w) return decode_rgb(data, size, what, out, h, w);
  std::vector<uint8_t> full(size_t(h) * size_t(w) * 3);
  decode_rgb(data, size, what, full.data(), h, w);
  resize_bilinear(full.data(), h, w, 3, out, out_h, out_w);
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
  const size_t row_len = size_t(dst_w) * C;
  for (int y = 0; y < dst_h; ++y) {
    const float* w = &ty.weights[size_t(y) * size_t(ty.max_taps)];
    const float* s = &tmp[size_t(ty.first[size_t(y)]) * row_len];
    uint8_t* out = dst + size_t(y) * row_len;
    for (size_t i = 0; i < row_len; ++i) {
      float acc = 0;
      for (int k = 0; k < ty.count[size_t(y)]; ++k) acc += w[k] * s[size_t(k) * row_len + i];
      out[i] = uint8_t(std::clamp(std::lround(acc), 0L, 255L));
    }
  }
}

}  // namespace trainer
