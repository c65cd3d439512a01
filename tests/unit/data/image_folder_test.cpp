// Tests of the image_folder reader on generated JPEG folders and on the real CIFAR-10 JPEGs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "core/data/image.h"
#include "core/data/util.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;
using trainer::test::write_jpeg;

namespace {

std::vector<uint8_t> solid(int h, int w, int channels, std::vector<uint8_t> colour) {
  std::vector<uint8_t> px(size_t(h * w * channels));
  for (size_t i = 0; i < px.size(); ++i) px[i] = colour[i % size_t(channels)];
  return px;
}

// Two classes (sorted: a_dog before b_cat), 8x12 solid colours, plus files that must be ignored.
void make_folder(const TempDir& d) {
  write_jpeg(d / "set/b_cat/img1.JPG", solid(8, 12, 3, {200, 40, 40}), 8, 12, 3);
  write_jpeg(d / "set/b_cat/img0.jpeg", solid(8, 12, 3, {40, 200, 40}), 8, 12, 3);
  write_jpeg(d / "set/a_dog/x.jpg", solid(8, 12, 3, {40, 40, 200}), 8, 12, 3);
  write_bytes(d / "set/a_dog/notes.txt", {'h', 'i'});
  write_bytes(d / "set/README", {'h', 'i'});
  std::filesystem::create_directories(d / "set/.cache");
}

bool near_colour(const uint8_t* px, std::vector<int> rgb, int tol = 6) {
  for (int c = 0; c < 3; ++c)
    if (std::abs(int(px[c]) - rgb[size_t(c)]) > tol) return false;
  return true;
}

}  // namespace

TEST_CASE("image_folder: classes, order, labels and pixels") {
  TempDir d;
  make_folder(d);
  auto ds = dataset_from("{type: image_folder, path: " + (d / "set") + "}");
  REQUIRE(ds->size() == 3);
  CHECK(ds->sample_shape() == Shape{8, 12, 3});
  CHECK(ds->class_names() == std::vector<std::string>{"a_dog", "b_cat"});
  CHECK(ds->describe().find("3 images, 2 classes, 8x12x3") != std::string::npos);
  std::vector<uint8_t> px(8 * 12 * 3);
  CHECK(ds->get(0, px.data()) == 0);
  CHECK(near_colour(&px[50 * 3], {40, 40, 200}));
  CHECK(ds->get(1, px.data()) == 1);  // img0.jpeg sorts before img1.JPG
  CHECK(near_colour(&px[0], {40, 200, 40}));
  CHECK(ds->get(2, px.data()) == 1);
  CHECK(near_colour(&px[95 * 3], {200, 40, 40}));
}

TEST_CASE("image_folder: relative path, limit_per_class, cache off") {
  TempDir d;
  make_folder(d);
  auto ds = dataset_from("{type: image_folder, path: set, limit_per_class: 1}", d.path());
  REQUIRE(ds->size() == 2);
  std::vector<uint8_t> px(8 * 12 * 3);
  CHECK(ds->get(1, px.data()) == 1);
  CHECK(near_colour(&px[0], {40, 200, 40}));  // the first file of b_cat in sorted order
  auto cached = dataset_from("{type: image_folder, path: set}", d.path());
  auto lazy = dataset_from("{type: image_folder, path: set, cache: false}", d.path());
  REQUIRE(lazy->size() == 3);
  std::vector<uint8_t> a(px.size()), b(px.size());
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(cached->get(i, a.data()) == lazy->get(i, b.data()));
    CHECK(a == b);
  }
}

TEST_CASE("image_folder: mixed sizes need image_size, which resizes") {
  TempDir d;
  make_folder(d);
  write_jpeg(d / "set/b_cat/odd.jpg", solid(16, 20, 3, {40, 200, 40}), 16, 20, 3);
  std::string e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: " + (d / "set") + "}"); });
  CHECK(e.find(d / "set/b_cat/odd.jpg") == 0);
  CHECK(e.find("16x20") != std::string::npos);
  CHECK(e.find("image_size") != std::string::npos);
  e = error_of<DataError>([&] { dataset_from("{type: image_folder, cache: false, path: " + (d / "set") + "}"); });
  CHECK(e.find("odd.jpg") != std::string::npos);

  auto ds = dataset_from("{type: image_folder, image_size: [5, 7], path: " + (d / "set") + "}");
  REQUIRE(ds->size() == 4);
  CHECK(ds->sample_shape() == Shape{5, 7, 3});
  std::vector<uint8_t> px(5 * 7 * 3);
  CHECK(ds->get(3, px.data()) == 1);  // odd.jpg: last in b_cat
  for (int p = 0; p < 35; ++p) CHECK(near_colour(&px[size_t(p) * 3], {40, 200, 40}));
}

TEST_CASE("image_folder: grayscale JPEGs become three equal channels") {
  TempDir d;
  std::vector<uint8_t> g(6 * 6);
  for (size_t i = 0; i < g.size(); ++i) g[i] = uint8_t(i < 18 ? 30 : 220);
  write_jpeg(d / "set/only/g.jpg", g, 6, 6, 1, 100);
  auto ds = dataset_from("{type: image_folder, path: " + (d / "set") + "}");
  REQUIRE(ds->sample_shape() == Shape{6, 6, 3});
  std::vector<uint8_t> px(6 * 6 * 3);
  ds->get(0, px.data());
  for (int p = 0; p < 36; ++p) {
    CHECK(px[size_t(p) * 3] == px[size_t(p) * 3 + 1]);
    CHECK(px[size_t(p) * 3] == px[size_t(p) * 3 + 2]);
  }
  CHECK(std::abs(int(px[0]) - 30) <= 8);
  CHECK(std::abs(int(px[35 * 3]) - 220) <= 8);
}

TEST_CASE("image_folder: corrupt and truncated JPEGs are data errors naming the file") {
  TempDir d;
  make_folder(d);
  write_bytes(d / "set/b_cat/zz.jpg", {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  std::string e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: " + (d / "set") + "}"); });
  CHECK(e.find(d / "set/b_cat/zz.jpg") == 0);
  CHECK(e.find("not a JPEG or PNG file (first bytes 6e 6f 74 20 61 20 6a 70)") != std::string::npos);

  TempDir t;
  std::vector<uint8_t> noise(32 * 32 * 3);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = uint8_t(i * 7919 % 251);
  write_jpeg(t / "set/c/full.jpg", noise, 32, 32, 3);
  std::vector<uint8_t> bytes = data_util::read_file(t / "set/c/full.jpg");
  bytes.resize(bytes.size() / 2);
  write_bytes(t / "set/c/full.jpg", bytes);
  e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: " + (t / "set") + "}"); });
  CHECK(e.find(t / "set/c/full.jpg") == 0);
}

TEST_CASE("image_folder: missing folder, no classes, empty class") {
  TempDir d;
  std::string e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: " + (d / "nope") + "}"); });
  CHECK(e == (d / "nope") + ": no such directory");
  std::filesystem::create_directories(d / "flat");
  write_jpeg(d / "flat/a.jpg", solid(4, 4, 3, {1, 2, 3}), 4, 4, 3);
  e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: " + (d / "flat") + "}"); });
  CHECK(e.find("no class subfolders") != std::string::npos);
  make_folder(d);
  std::filesystem::create_directories(d / "set/c_empty");
  write_bytes(d / "set/c_empty/readme.txt", {'x'});
  e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: " + (d / "set") + "}"); });
  CHECK(e.find(d / "set/c_empty") == 0);
  CHECK(e.find("no .jpg/.jpeg/.png images") != std::string::npos);
  e = error_of<cfg::ConfigError>([&] { dataset_from("{type: image_folder, pth: x}"); });
  CHECK(e.find("did you mean 'path'") != std::string::npos);
}

TEST_CASE("image_folder: resize_bilinear interpolates and averages") {
  // Enlarging 1x2 -> 1x4: plain bilinear with half-pixel centres, edges clamped.
  uint8_t src[2] = {0, 100}, up[4];
  resize_bilinear(src, 1, 2, 1, up, 1, 4);
  CHECK(up[0] == 0);
  CHECK(up[1] == 25);
  CHECK(up[2] == 75);
  CHECK(up[3] == 100);
  // Shrinking 1x4 -> 1x2 by 2: a triangle filter of width 2 per output (PIL BILINEAR).
  uint8_t row[4] = {0, 40, 80, 120}, down[2];
  resize_bilinear(row, 1, 4, 1, down, 1, 2);
  CHECK(down[0] == 29);  // (0*.75 + 40*.75 + 80*.25) / 1.75 = 28.6
  CHECK(down[1] == 91);  // (40*.25 + 80*.75 + 120*.75) / 1.75 = 91.4
  // Same size: identity.
  uint8_t same[4];
  resize_bilinear(row, 2, 2, 1, same, 2, 2);
  CHECK(std::equal(row, row + 4, same));
}

TEST_CASE("image_folder: real CIFAR-10 JPEGs (100 per class)") {
  std::string tarball = trainer::test::data_dir() + "/cifar10-jpg-test.tar.gz";
  if (!std::filesystem::exists(tarball))
    TRAINER_SKIP(Data, tarball << " not found (set TRAINER_DATA to the folder holding it)");
  TempDir d;
  // Only files 0000..0149 of each class: creating 10,000 small files is slow on some disks.
  std::string cmd = "tar -xzf '" + tarball + "' -C '" + d.path() + "' --wildcards '*/00[0-9][0-9].jpg' '*/01[0-4][0-9].jpg'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto ds = dataset_from("{type: image_folder, path: cifar10-jpg/test, limit_per_class: 100}", d.path());
  REQUIRE(ds->size() == 1000);
  CHECK(ds->sample_shape() == Shape{32, 32, 3});
  CHECK(ds->class_names() == std::vector<std::string>{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                                      "horse", "ship", "truck"});
  std::vector<uint8_t> px(3072);
  double mean = 0;
  for (int64_t i = 0; i < ds->size(); ++i) {
    CHECK(ds->get(i, px.data()) == i / 100);
    for (uint8_t v : px) mean += v / (3072.0 * 1000);
  }
  CHECK(mean > 90);  // CIFAR-10's mean pixel is about 120
  CHECK(mean < 150);
}
