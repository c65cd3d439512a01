// Every kind of bad data, in one table: each is a DataError whose message names the file (and offset).
#include <catch2/catch.hpp>

#include <functional>

#include "core/data/util.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::PngSpec;
using trainer::test::TempDir;
using trainer::test::write_bytes;
using trainer::test::write_jpeg;

namespace {

struct Case {
  const char* name;
  std::function<void(const TempDir&)> make;  // writes the files under the temp dir
  std::string yaml;                          // the dataset section (paths relative to the temp dir)
  std::string message;                       // the expected message, "{d}" standing for the temp dir
};

std::string expand(std::string s, const std::string& dir) {
  for (size_t p; (p = s.find("{d}")) != std::string::npos;) s.replace(p, 3, dir);
  return s;
}

void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

std::vector<uint8_t> idx(uint32_t magic, std::vector<uint32_t> dims, size_t data) {
  std::vector<uint8_t> v;
  put32(v, magic);
  for (uint32_t d : dims) put32(v, d);
  v.resize(v.size() + data, 7);
  return v;
}

void good_jpeg(const TempDir& d, const std::string& rel) { write_jpeg(d / rel, std::vector<uint8_t>(48, 100), 4, 4, 3); }

std::vector<uint8_t> truncated(std::vector<uint8_t> v, size_t keep) {
  v.resize(keep);
  return v;
}

}  // namespace

TEST_CASE("bad data: every case is a DataError naming the file") {
  PngSpec png;
  png.height = 4, png.width = 4, png.rows.assign(48, 3);
  const std::vector<uint8_t> png_bytes = trainer::test::encode_png(png);
  const std::vector<Case> cases = {
      {"missing folder", [](const TempDir&) {}, "{type: image_folder, path: nope}", "{d}/nope: no such directory"},
      {"empty class", [](const TempDir& d) { good_jpeg(d, "s/a/0.jpg"), std::filesystem::create_directories(d / "s/b"); },
       "{type: image_folder, path: s}", "{d}/s/b: class folder has no .jpg/.jpeg/.png images"},
      {"corrupt JPEG", [](const TempDir& d) { good_jpeg(d, "s/a/0.jpg"), write_bytes(d / "s/a/1.jpg", {0xff, 0xd8, 0xff, 0, 1}); },
       "{type: image_folder, path: s}", "{d}/s/a/1.jpg: cannot decode JPEG: "},
      {"truncated JPEG",
       [](const TempDir& d) {
         good_jpeg(d, "s/a/0.jpg");
         write_bytes(d / "s/a/1.jpg", truncated(data_util::read_file(d / "s/a/0.jpg"), 300));
       },
       "{type: image_folder, path: s}", "{d}/s/a/1.jpg: cannot decode JPEG: Premature end of JPEG file"},
      {"corrupt PNG", [&](const TempDir& d) { auto b = png_bytes; b[14] ^= 1; write_bytes(d / "s/a/0.png", b); },
       "{type: image_folder, path: s}", "{d}/s/a/0.png: cannot decode PNG: IHDR chunk missing"},
      {"truncated PNG", [&](const TempDir& d) { write_bytes(d / "s/a/0.png", truncated(png_bytes, 50)); },
       "{type: image_folder, path: s}", "{d}/s/a/0.png: cannot decode PNG: truncated file (ends at byte 50)"},
      {"not an image", [](const TempDir& d) { write_bytes(d / "s/a/0.jpg", {'G', 'I', 'F'}); },
       "{type: image_folder, path: s}", "{d}/s/a/0.jpg: not a JPEG or PNG file (first bytes 47 49 46)"},
      {"truncated CIFAR-10 batch",
       [](const TempDir& d) { write_bytes(d / "c/test_batch.bin", std::vector<uint8_t>(3073 + 100, 1)); },
       "{type: cifar10_bin, path: c, split: test}",
       "{d}/c/test_batch.bin: truncated at byte offset 3173 (records are 3073 bytes; the last is 2973 bytes short)"},
      {"truncated CIFAR-100 file", [](const TempDir& d) { write_bytes(d / "c/test.bin", std::vector<uint8_t>(3000, 1)); },
       "{type: cifar100_bin, path: c, split: test}",
       "{d}/c/test.bin: truncated at byte offset 3000 (records are 3074 bytes; the last is 74 bytes short)"},
      {"wrong IDX magic",
       [](const TempDir& d) {
         write_bytes(d / "img", idx(0x00000802, {1, 2, 2}, 4));
         write_bytes(d / "lab", idx(2049, {1}, 1));
       },
       "{type: mnist_idx, images: img, labels: lab}",
       "{d}/img: not an IDX image file (magic 0x00000802, expected 0x00000803)"},
      {"label/image count mismatch",
       [](const TempDir& d) {
         write_bytes(d / "img", idx(2051, {3, 2, 2}, 12));
         write_bytes(d / "lab", idx(2049, {2}, 2));
       },
       "{type: mnist_idx, images: img, labels: lab}", "{d}/img has 3 images but {d}/lab has 2 labels"},
      {"truncated IDX",
       [](const TempDir& d) {
         write_bytes(d / "img", idx(2051, {3, 2, 2}, 11));
         write_bytes(d / "lab", idx(2049, {3}, 3));
       },
       "{type: mnist_idx, images: img, labels: lab}",
       "{d}/img: truncated at byte offset 27 (header says 3 images of 2x2 = 28 bytes)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir d;
    c.make(d);
    const std::string e = error_of<DataError>([&] { dataset_from(c.yaml, d.path()); });
    const std::string want = expand(c.message, d.path());
    CHECK(e.substr(0, want.size()) == want);
  }
}

TEST_CASE("bad data: non-RGB images are converted, not rejected") {
  TempDir d;
  std::vector<uint8_t> gray(16, 77);
  write_jpeg(d / "s/a/gray.jpg", gray, 4, 4, 1, 100);
  PngSpec ga;
  ga.height = 4, ga.width = 4, ga.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  for (int i = 0; i < 16; ++i) ga.rows.insert(ga.rows.end(), {uint8_t(200), uint8_t(i * 16)});
  trainer::test::write_png(d / "s/a/ga.png", ga);
  PngSpec rgba;
  rgba.height = 4, rgba.width = 4, rgba.color_type = PNG_COLOR_TYPE_RGBA;
  for (int i = 0; i < 16; ++i) rgba.rows.insert(rgba.rows.end(), {uint8_t(1), uint8_t(2), uint8_t(3), uint8_t(0)});
  trainer::test::write_png(d / "s/a/rgba.png", rgba);
  auto ds = dataset_from("{type: image_folder, path: s}", d.path());
  REQUIRE(ds->size() == 3);
  std::vector<uint8_t> px(48);
  ds->get(0, px.data());  // ga.png: gray replicated, alpha dropped
  CHECK(px == std::vector<uint8_t>(48, 200));
  ds->get(1, px.data());  // gray.jpg
  for (uint8_t v : px) CHECK(std::abs(int(v) - 77) <= 1);
  ds->get(2, px.data());  // rgba.png, fully transparent: the stored colour
  for (size_t i = 0; i < 48; ++i) CHECK(px[i] == uint8_t(1 + i % 3));
}
