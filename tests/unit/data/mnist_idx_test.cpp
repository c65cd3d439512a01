// Tests of the mnist_idx reader on generated IDX files, raw and gzipped, and its errors.
#include <catch2/catch.hpp>
#include <zlib.h>

#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;

namespace {

void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 2051) {
  std::vector<uint8_t> v;
  put32(v, magic), put32(v, n), put32(v, rows), put32(v, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) v.push_back(uint8_t(i * 31 % 256));
  return v;
}

std::vector<uint8_t> idx_labels(uint32_t n, uint32_t magic = 2049) {
  std::vector<uint8_t> v;
  put32(v, magic), put32(v, n);
  for (uint32_t i = 0; i < n; ++i) v.push_back(uint8_t((i * 3) % 10));
  return v;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  gzclose(f);
}

}  // namespace

TEST_CASE("mnist_idx: raw and gzipped files read the same") {
  TempDir d;
  write_bytes(d / "img", idx_images(5));
  write_bytes(d / "lab", idx_labels(5));
  write_gz(d / "img.gz", idx_images(5));
  write_gz(d / "lab.gz", idx_labels(5));
  auto raw = dataset_from("{type: mnist_idx, images: img, labels: lab}", d.path());
  auto gz = dataset_from("{type: mnist_idx, images: img.gz, labels: lab.gz}", d.path());
  REQUIRE(raw->size() == 5);
  REQUIRE(gz->size() == 5);
  CHECK(raw->sample_shape() == Shape{28, 28, 1});
  CHECK(raw->num_classes() == 10);
  std::vector<uint8_t> a(784), b(784);
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(raw->get(i, a.data()) == (i * 3) % 10);
    CHECK(gz->get(i, b.data()) == (i * 3) % 10);
    CHECK(a == b);
    CHECK(a[10] == uint8_t((i * 784 + 10) * 31 % 256));
  }
}

TEST_CASE("mnist_idx: wrong magic, count mismatch, truncation, labels out of range") {
  TempDir d;
  write_bytes(d / "img", idx_images(5));
  write_bytes(d / "lab", idx_labels(5));
  write_bytes(d / "lab4", idx_labels(4));
  std::string e = error_of<DataError>([&] { dataset_from("{type: mnist_idx, images: lab, labels: lab}", d.path()); });
  CHECK(e == (d / "lab") + ": not an IDX image file (magic 0x00000801, expected 0x00000803)");
  e = error_of<DataError>([&] { dataset_from("{type: mnist_idx, images: img, labels: img}", d.path()); });
  CHECK(e.find((d / "img") + ": not an IDX label file (magic 0x00000803") == 0);
  e = error_of<DataError>([&] { dataset_from("{type: mnist_idx, images: img, labels: lab4}", d.path()); });
  CHECK(e == (d / "img") + " has 5 images but " + (d / "lab4") + " has 4 labels");
  std::vector<uint8_t> cut = idx_images(5);
  cut.resize(cut.size() - 1);
  write_bytes(d / "cut", cut);
  e = error_of<DataError>([&] { dataset_from("{type: mnist_idx, images: cut, labels: lab}", d.path()); });
  CHECK(e.find("truncated at byte offset 3935") != std::string::npos);
  e = error_of<DataError>([&] { dataset_from("{type: mnist_idx, images: img, labels: lab, classes: 5}", d.path()); });
  CHECK(e.find("label 6 at byte offset 10 is not below classes (5)") != std::string::npos);
  e = error_of<DataError>([&] { dataset_from("{type: mnist_idx, images: nope, labels: lab}", d.path()); });
  CHECK(e.find((d / "nope") + ": cannot open") == 0);
  e = error_of<cfg::ConfigError>([&] { dataset_from("{type: mnist_idx, images: img}", d.path()); });
  CHECK(e.find("missing required key 'labels'") != std::string::npos);
}
