// Tests of the cifar100_bin reader on generated record files: fine/coarse labels, names, errors.
#include <catch2/catch.hpp>

#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;

namespace {

uint8_t pattern(int record, int c, int y, int x) { return uint8_t((record * 11 + c * 5 + y * 3 + x) % 256); }

// `count` records: coarse label (first + k) % 20, fine label (first + k) * 7 % 100, CHW pixels.
std::vector<uint8_t> records(int first, int count) {
  std::vector<uint8_t> out;
  for (int k = 0; k < count; ++k) {
    out.push_back(uint8_t((first + k) % 20));
    out.push_back(uint8_t((first + k) * 7 % 100));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back(pattern(first + k, c, y, x));
  }
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

TEST_CASE("cifar100_bin: fine and coarse labels, HWC pixels, splits and class names") {
  TempDir d;
  write_bytes(d / "c100/train.bin", records(0, 6));
  write_bytes(d / "c100/test.bin", records(50, 2));
  auto fine = dataset_from("{type: cifar100_bin, path: c100}", d.path());
  REQUIRE(fine->size() == 6);
  CHECK(fine->num_classes() == 100);
  CHECK(fine->sample_shape() == Shape{32, 32, 3});
  CHECK(fine->class_names().at(42) == "42");  // no fine_label_names.txt
  std::vector<uint8_t> px(3072);
  CHECK(fine->get(5, px.data()) == 35);
  bool ok = true;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < 3; ++c) ok = ok && px[size_t((y * 32 + x) * 3 + c)] == pattern(5, c, y, x);
  CHECK(ok);

  std::string coarse_names;
  for (int i = 0; i < 20; ++i) coarse_names += "super" + std::to_string(i) + "\n";
  write_text(d / "c100/coarse_label_names.txt", coarse_names);
  auto coarse = dataset_from("{type: cifar100_bin, path: c100, label: coarse, split: test}", d.path());
  REQUIRE(coarse->size() == 2);
  CHECK(coarse->num_classes() == 20);
  CHECK(coarse->get(1, px.data()) == 51 % 20);
  CHECK(coarse->class_names().at(19) == "super19");
  CHECK(coarse->describe() == "cifar100_bin c100 (test, coarse labels): 2 images, 20 classes, 32x32x3");
  std::string e = error_of<cfg::ConfigError>([&] { dataset_from("{type: cifar100_bin, path: c100, label: fien}"); });
  CHECK(e.find("did you mean 'fine'") != std::string::npos);
}

TEST_CASE("cifar100_bin: truncated file, bad labels, missing file") {
  TempDir d;
  std::vector<uint8_t> cut = records(0, 3);
  cut.resize(3074 * 2 + 10);
  write_bytes(d / "c100/train.bin", cut);
  std::string e = error_of<DataError>([&] { dataset_from("{type: cifar100_bin, path: c100}", d.path()); });
  CHECK(e == (d / "c100/train.bin") + ": truncated at byte offset 6158 (records are 3074 bytes; the last is 3064 bytes short)");
  std::vector<uint8_t> bad = records(0, 3);
  bad[3074 * 2 + 1] = 100;  // third record's fine label
  write_bytes(d / "c100/train.bin", bad);
  e = error_of<DataError>([&] { dataset_from("{type: cifar100_bin, path: c100}", d.path()); });
  CHECK(e == (d / "c100/train.bin") + ": label 100 at byte offset 6149 is not a CIFAR-100 fine class (0..99)");
  bad = records(0, 3);
  bad[3074] = 20;  // second record's coarse label
  write_bytes(d / "c100/train.bin", bad);
  e = error_of<DataError>([&] { dataset_from("{type: cifar100_bin, path: c100, label: coarse}", d.path()); });
  CHECK(e == (d / "c100/train.bin") + ": label 20 at byte offset 3074 is not a CIFAR-100 coarse class (0..19)");
  e = error_of<DataError>([&] { dataset_from("{type: cifar100_bin, path: c100, split: test}", d.path()); });
  CHECK(e.find((d / "c100/test.bin") + ": cannot open") == 0);
  e = error_of<DataError>([&] { dataset_from("{type: cifar100_bin, path: nowhere}", d.path()); });
  CHECK(e == (d / "nowhere") + ": no such directory (expected the cifar100_bin files train.bin in it)");
}
