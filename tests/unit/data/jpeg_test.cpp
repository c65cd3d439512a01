// Tests of JPEG decoding: CMYK/YCCK (written with libjpeg's API), harmless vs damaging warnings.
#include <catch2/catch.hpp>
// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include "core/data/image.h"
#include "core/data/util.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;

namespace {

// A 4-channel JPEG written from `cmyk` (h*w*4 bytes, stored as given) at quality 100 without
// subsampling, in colour space `space` (JCS_CMYK or JCS_YCCK), with or without the Adobe marker.
std::vector<uint8_t> cmyk_jpeg(const std::vector<uint8_t>& cmyk, int h, int w, J_COLOR_SPACE space, bool adobe) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w), c.image_height = JDIMENSION(h);
  c.input_components = 4, c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, space);
  jpeg_set_quality(&c, 100, TRUE);
  for (int i = 0; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  c.write_Adobe_marker = adobe ? TRUE : FALSE;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(cmyk.data() + size_t(c.next_scanline) * size_t(w) * 4);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

// Smooth CMYK content (JPEG at quality 100 keeps it within a few levels).
std::vector<uint8_t> cmyk_pattern(int h, int w) {
  std::vector<uint8_t> v;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      v.insert(v.end(), {uint8_t(40 + 10 * x), uint8_t(200 - 8 * y), uint8_t(128), uint8_t(150 + 5 * (x + y))});
  return v;
}

std::vector<uint8_t> decode(const std::vector<uint8_t>& file, int h, int w) {
  ImageDecoder d;
  std::vector<uint8_t> rgb(size_t(h * w * 3));
  d.decode_rgb_resized(file.data(), file.size(), "t.jpg", rgb.data(), h, w);
  return rgb;
}

int max_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

}  // namespace

TEST_CASE("jpeg: CMYK and YCCK become RGB as PIL converts them (Adobe marker: inverted)") {
  const int h = 8, w = 8;
  const std::vector<uint8_t> cmyk = cmyk_pattern(h, w);
  std::vector<uint8_t> inverted_ref, plain_ref;  // R = C*K/255 (Adobe) or (255-C)(255-K)/255
  for (size_t p = 0; p < size_t(h * w); ++p)
    for (int c = 0; c < 3; ++c) {
      const int v = cmyk[p * 4 + size_t(c)], k = cmyk[p * 4 + 3];
      inverted_ref.push_back(uint8_t((v * k + 127) / 255));
      plain_ref.push_back(uint8_t(((255 - v) * (255 - k) + 127) / 255));
    }
  CHECK(max_diff(decode(cmyk_jpeg(cmyk, h, w, JCS_CMYK, true), h, w), inverted_ref) <= 3);
  CHECK(max_diff(decode(cmyk_jpeg(cmyk, h, w, JCS_YCCK, true), h, w), inverted_ref) <= 3);
  CHECK(max_diff(decode(cmyk_jpeg(cmyk, h, w, JCS_CMYK, false), h, w), plain_ref) <= 3);

  TempDir d;
  write_bytes(d / "set/c/cmyk.jpg", cmyk_jpeg(cmyk, h, w, JCS_CMYK, true));
  auto ds = dataset_from("{type: image_folder, path: set}", d.path());
  std::vector<uint8_t> px(size_t(h * w * 3));
  ds->get(0, px.data());
  CHECK(max_diff(px, inverted_ref) <= 3);
}

TEST_CASE("jpeg: extraneous bytes before a marker are harmless, damaged data is an error") {
  std::vector<uint8_t> pixels(24 * 24 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 13 % 256);
  TempDir d;
  trainer::test::write_jpeg(d / "a.jpg", pixels, 24, 24, 3);
  const std::vector<uint8_t> good = data_util::read_file(d / "a.jpg");
  const std::vector<uint8_t> clean = decode(good, 24, 24);
  // Garbage between the scan and EOI: libjpeg warns "Corrupt JPEG data: 5 extraneous bytes
  // before marker 0xd9" but every pixel is intact (common in scraped sets such as cats vs dogs).
  std::vector<uint8_t> extra = good;
  REQUIRE(extra[extra.size() - 2] == 0xff);
  extra.insert(extra.end() - 2, {1, 2, 3, 4, 5});
  CHECK(decode(extra, 24, 24) == clean);

  ImageDecoder dec;
  std::vector<uint8_t> rgb(24 * 24 * 3);
  std::vector<uint8_t> cut(good.begin(), good.begin() + long(good.size() * 2 / 3));
  std::string e = error_of<DataError>([&] { dec.decode_rgb_resized(cut.data(), cut.size(), "c.jpg", rgb.data(), 24, 24); });
  CHECK(e.find("c.jpg: cannot decode JPEG: ") == 0);
  CHECK((e.find("Premature end") != std::string::npos || e.find("premature end") != std::string::npos));
  std::vector<uint8_t> header_cut(good.begin(), good.begin() + 40);
  e = error_of<DataError>([&] { dec.decode_rgb_resized(header_cut.data(), header_cut.size(), "h.jpg", rgb.data(), 24, 24); });
  CHECK(e.find("h.jpg: cannot decode JPEG: ") == 0);
  // The decoder is reusable after an error.
  dec.decode_rgb_resized(good.data(), good.size(), "a.jpg", rgb.data(), 24, 24);
  CHECK(rgb == clean);
}
