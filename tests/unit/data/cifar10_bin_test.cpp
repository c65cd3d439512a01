// Tests of the cifar10_bin reader on generated batch files: layout conversion, splits, errors.
#include <catch2/catch.hpp>

#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;

namespace {

uint8_t pattern(int record, int c, int y, int x) { return uint8_t((record * 13 + c * 7 + y * 3 + x) % 256); }

// `count` records with labels (first + k) % 10 and pixels pattern(first + k, ...), CHW planes.
std::vector<uint8_t> records(int first, int count) {
  std::vector<uint8_t> out;
  for (int k = 0; k < count; ++k) {
    out.push_back(uint8_t((first + k) % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back(pattern(first + k, c, y, x));
  }
  return out;
}

void make_batches(const TempDir& d) {
  for (int b = 1; b <= 5; ++b) write_bytes(d / ("bin/data_batch_" + std::to_string(b) + ".bin"), records((b - 1) * 3, 3));
  write_bytes(d / "bin/test_batch.bin", records(100, 4));
}

}  // namespace

TEST_CASE("cifar10_bin: records become HWC samples, train is batches 1..5") {
  TempDir d;
  make_batches(d);
  auto ds = dataset_from("{type: cifar10_bin, path: bin}", d.path());
  REQUIRE(ds->size() == 15);
  CHECK(ds->sample_shape() == Shape{32, 32, 3});
  CHECK(ds->num_classes() == 10);
  CHECK(ds->class_names().at(3) == "3");  // no batches.meta.txt
  std::vector<uint8_t> px(3072);
  for (int i : {0, 7, 14}) {
    CHECK(ds->get(i, px.data()) == i % 10);
    bool ok = true;
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c) ok = ok && px[size_t((y * 32 + x) * 3 + c)] == pattern(i, c, y, x);
    CHECK(ok);
  }
}

TEST_CASE("cifar10_bin: test split and class names from batches.meta.txt") {
  TempDir d;
  make_batches(d);
  write_bytes(d / "bin/batches.meta.txt",
              std::vector<uint8_t>({'a', 'i', 'r', 'p', 'l', 'a', 'n', 'e', '\n', 'c', 'a', 'r', '\n'}));
  auto two = dataset_from("{type: cifar10_bin, path: " + (d / "bin") + ", split: test}");
  CHECK(two->class_names().at(0) == "0");  // only two names: not the expected file, ignored
  std::string names = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
  write_bytes(d / "bin/batches.meta.txt", std::vector<uint8_t>(names.begin(), names.end()));
  auto ds = dataset_from("{type: cifar10_bin, path: " + (d / "bin") + ", split: test}");
  REQUIRE(ds->size() == 4);
  CHECK(ds->class_names().at(9) == "truck");
  std::vector<uint8_t> px(3072);
  CHECK(ds->get(1, px.data()) == 1);
  CHECK(px[0] == pattern(101, 0, 0, 0));
  CHECK(ds->describe().find("(test): 4 images") != std::string::npos);
  std::string e = error_of<cfg::ConfigError>([&] { dataset_from("{type: cifar10_bin, path: x, split: tset}"); });
  CHECK(e.find("did you mean 'test'") != std::string::npos);
}

TEST_CASE("cifar10_bin: truncated file, bad label, missing files") {
  TempDir d;
  make_batches(d);
  std::vector<uint8_t> cut = records(0, 2);
  cut.resize(3073 * 2 + 100);
  write_bytes(d / "bin/data_batch_3.bin", cut);
  std::string e = error_of<DataError>([&] { dataset_from("{type: cifar10_bin, path: " + (d / "bin") + "}"); });
  CHECK(e == (d / "bin/data_batch_3.bin") + ": truncated at byte offset 6246 (records are 3073 bytes; the last is 2973 bytes short)");

  std::vector<uint8_t> bad = records(0, 2);
  bad[3073] = 10;
  write_bytes(d / "bin/data_batch_3.bin", bad);
  e = error_of<DataError>([&] { dataset_from("{type: cifar10_bin, path: " + (d / "bin") + "}"); });
  CHECK(e.find("label 10 at byte offset 3073") != std::string::npos);

  std::filesystem::remove(d / "bin/data_batch_3.bin");
  e = error_of<DataError>([&] { dataset_from("{type: cifar10_bin, path: " + (d / "bin") + "}"); });
  CHECK(e.find((d / "bin/data_batch_3.bin") + ": cannot open") == 0);
  e = error_of<DataError>([&] { dataset_from("{type: cifar10_bin, path: " + (d / "none") + "}"); });
  CHECK(e.find("no such directory") != std::string::npos);
}
