// Tests of PNG decoding: every colour type and bit depth against references, alpha dropped, errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/data/image.h"
#include "core/data/random.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::encode_png;
using trainer::test::error_of;
using trainer::test::PngSpec;
using trainer::test::TempDir;
using trainer::test::write_bytes;
using trainer::test::write_png;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  Rng rng(seed);
  for (auto& b : v) b = uint8_t(rng.uniform_int(0, 255));
  return v;
}

std::vector<uint8_t> decode(const std::vector<uint8_t>& file, int h, int w) {
  int fh = 0, fw = 0;
  ImageDecoder d;
  d.header(file.data(), file.size(), "test.png", fh, fw);
  REQUIRE(fh == h);
  REQUIRE(fw == w);
  std::vector<uint8_t> rgb(size_t(h * w * 3));
  d.decode_rgb(file.data(), file.size(), "test.png", rgb.data(), h, w);
  return rgb;
}

// RGB from interleaved samples with `channels` per pixel, taking `color` of them (1: gray).
std::vector<uint8_t> to_rgb(const std::vector<uint8_t>& px, int channels, int color) {
  std::vector<uint8_t> out;
  for (size_t p = 0; p < px.size() / size_t(channels); ++p)
    for (int c = 0; c < 3; ++c) out.push_back(px[p * size_t(channels) + size_t(color == 1 ? 0 : c)]);
  return out;
}

}  // namespace

TEST_CASE("png: 8-bit RGB, RGBA, gray and gray+alpha decode exactly, alpha is dropped") {
  const int h = 5, w = 7;
  struct Case {
    int type, channels, color;
  };
  for (Case c : {Case{PNG_COLOR_TYPE_RGB, 3, 3}, Case{PNG_COLOR_TYPE_RGBA, 4, 3}, Case{PNG_COLOR_TYPE_GRAY, 1, 1},
                 Case{PNG_COLOR_TYPE_GRAY_ALPHA, 2, 1}}) {
    CAPTURE(c.type);
    PngSpec s;
    s.height = h, s.width = w, s.color_type = c.type;
    s.rows = random_bytes(size_t(h * w * c.channels), uint64_t(c.type));
    CHECK(decode(encode_png(s), h, w) == to_rgb(s.rows, c.channels, c.color));
  }
}

TEST_CASE("png: palette images take their colours, tRNS ignored, 1-bit gray expands to 0/255") {
  PngSpec s;
  s.height = 2, s.width = 3, s.color_type = PNG_COLOR_TYPE_PALETTE;
  s.palette = {{10, 20, 30}, {200, 100, 0}, {0, 255, 7}};
  s.trns = {0, 128};  // entry 0 fully transparent: its colour is kept all the same
  s.rows = {0, 1, 2, 2, 1, 0};
  std::vector<uint8_t> want;
  for (uint8_t i : s.rows) want.insert(want.end(), {s.palette[i].red, s.palette[i].green, s.palette[i].blue});
  CHECK(decode(encode_png(s), 2, 3) == want);

  PngSpec g;
  g.height = 2, g.width = 10, g.color_type = PNG_COLOR_TYPE_GRAY, g.bit_depth = 1;
  g.rows = {0b10110000, 0b01000000, 0b00000000, 0b11000000};  // 2 bytes per row (10 pixels)
  std::vector<uint8_t> out = decode(encode_png(g), 2, 10);
  const int bits[20] = {1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
  for (int p = 0; p < 20; ++p) {
    CAPTURE(p);
    CHECK(out[size_t(p) * 3] == (bits[p] ? 255 : 0));
    CHECK(out[size_t(p) * 3 + 2] == out[size_t(p) * 3]);
  }
}

TEST_CASE("png: 16-bit samples scale to 8 bits with rounding") {
  const int h = 3, w = 4;
  for (int type : {PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGBA, PNG_COLOR_TYPE_GRAY}) {
    CAPTURE(type);
    const int channels = type == PNG_COLOR_TYPE_RGB ? 3 : type == PNG_COLOR_TYPE_RGBA ? 4 : 1;
    PngSpec s;
    s.height = h, s.width = w, s.color_type = type, s.bit_depth = 16;
    std::vector<uint16_t> v(size_t(h * w * channels));
    Rng rng(uint64_t(type) + 99);
    for (size_t i = 0; i < v.size(); ++i) v[i] = i % 2 ? uint16_t(257 * rng.uniform_int(0, 255)) : uint16_t(rng.next());
    v[0] = 0, v[1] = 65535, v[2] = 128;  // ends and a value just above a rounding boundary
    for (uint16_t x : v) s.rows.insert(s.rows.end(), {uint8_t(x >> 8), uint8_t(x & 0xff)});
    std::vector<uint8_t> want8;
    for (uint16_t x : v) want8.push_back(uint8_t(std::lround(x * 255.0 / 65535.0)));
    CHECK(decode(encode_png(s), h, w) == to_rgb(want8, channels, channels == 1 ? 1 : 3));
  }
}

TEST_CASE("png: interlaced (Adam7) equals non-interlaced") {
  PngSpec s;
  s.height = 13, s.width = 11;
  s.rows = random_bytes(13 * 11 * 3, 5);
  std::vector<uint8_t> plain = decode(encode_png(s), 13, 11);
  s.interlace = true;
  CHECK(decode(encode_png(s), 13, 11) == plain);
  CHECK(plain == s.rows);
}

TEST_CASE("png: truncated, corrupt, empty and non-image files are data errors naming the file") {
  PngSpec s;
  s.height = 16, s.width = 16;
  s.rows = random_bytes(16 * 16 * 3, 6);
  const std::vector<uint8_t> good = encode_png(s);
  ImageDecoder d;
  std::vector<uint8_t> rgb(16 * 16 * 3);
  auto decode_err = [&](const std::vector<uint8_t>& bytes) {
    return error_of<DataError>([&] { d.decode_rgb_resized(bytes.data(), bytes.size(), "x/a.png", rgb.data(), 16, 16); });
  };
  std::vector<uint8_t> cut(good.begin(), good.begin() + long(good.size() / 2));
  CHECK(decode_err(cut) == "x/a.png: cannot decode PNG: truncated file (ends at byte " + std::to_string(cut.size()) + ")");
  std::vector<uint8_t> bad = good;
  bad[bad.size() / 2] ^= 0x55;  // inside the IDAT data: its CRC (or zlib's Adler-32) no longer matches
  CHECK(decode_err(bad).find("x/a.png: cannot decode PNG: IDAT: ") == 0);
  bad = good;
  bad[bad.size() - 20] ^= 0x55;  // the zlib stream's Adler-32 checksum
  CHECK(decode_err(bad) == "x/a.png: cannot decode PNG: IDAT: incorrect data check");
  std::vector<uint8_t> header_only(good.begin(), good.begin() + 20);
  CHECK(decode_err(header_only) == "x/a.png: cannot decode PNG: truncated before the end of the IHDR chunk");
  CHECK(decode_err({}) == "x/a.png: empty file (0 bytes), not an image");
  CHECK(decode_err({'G', 'I', 'F', '8', '9', 'a', 0, 0}) == "x/a.png: not a JPEG or PNG file (first bytes 47 49 46 38 39 61 00 00)");
}

TEST_CASE("png: image_folder reads PNG and JPEG side by side, by content not by name") {
  TempDir d;
  PngSpec s;
  s.height = 4, s.width = 6, s.color_type = PNG_COLOR_TYPE_RGBA;
  s.rows = random_bytes(4 * 6 * 4, 7);
  write_png(d / "set/a/x.png", s);
  write_png(d / "set/a/y.JPG", s);  // a PNG named .JPG: decoded as what it is
  trainer::test::write_jpeg(d / "set/b/z.jpeg", std::vector<uint8_t>(4 * 6 * 3, 90), 4, 6, 3);
  auto ds = dataset_from("{type: image_folder, path: set}", d.path());
  REQUIRE(ds->size() == 3);
  std::vector<uint8_t> px(4 * 6 * 3);
  CHECK(ds->get(0, px.data()) == 0);
  CHECK(px == to_rgb(s.rows, 4, 3));
  CHECK(ds->get(1, px.data()) == 0);
  CHECK(px == to_rgb(s.rows, 4, 3));
  CHECK(ds->get(2, px.data()) == 1);
  CHECK(std::abs(int(px[0]) - 90) <= 2);
}
