// Tests of the `text` and `tokens` sets: byte windows and their next-byte labels, stride, range, folders and pattern, refusals, and the Loader's per-position labels.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>

#include "core/data/loader.h"
#include "core/data/npy_format.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;

namespace {

void write_text(const std::string& path, const std::string& text) {
  trainer::test::write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// Sample i's bytes and labels as strings.
std::pair<std::string, std::string> window(const Dataset& ds, int64_t i) {
  const int64_t T = ds.sample_shape()[0];
  std::vector<float> v(static_cast<size_t>(T));
  std::vector<int32_t> l(static_cast<size_t>(T));
  ds.get_f32_labels(i, v.data(), l.data());
  std::string x, y;
  for (int64_t t = 0; t < T; ++t) {
    x += char(int(v[size_t(t)]));
    y += char(l[size_t(t)]);
  }
  return {x, y};
}

}  // namespace

TEST_CASE("text: windows of block_size bytes, each position labelled by the next byte") {
  TempDir dir;
  write_text(dir / "t.txt", "abcdefghij");
  auto ds = dataset_from("{type: text, path: t.txt, block_size: 3}", dir.path());
  CHECK(ds->float_samples());
  CHECK(ds->sample_shape() == Shape{3});
  CHECK(ds->label_shape() == Shape{3});
  CHECK(ds->num_classes() == 256);
  REQUIRE(ds->size() == 3);  // windows of 4 bytes at 0, 3, 6 (the last byte of one is the first of the next)
  CHECK(window(*ds, 0) == std::pair<std::string, std::string>{"abc", "bcd"});
  CHECK(window(*ds, 1) == std::pair<std::string, std::string>{"def", "efg"});
  CHECK(window(*ds, 2) == std::pair<std::string, std::string>{"ghi", "hij"});
  std::vector<float> v(3);
  CHECK(ds->get_f32(1, v.data()) == 'g');  // one label: the byte after the window
  CHECK(ds->describe() == "text " + dir / "t.txt" + ": 3 windows of 3 bytes (stride 3), 10 bytes");

  auto overlapping = dataset_from("{type: text, path: t.txt, block_size: 3, stride: 1}", dir.path());
  REQUIRE(overlapping->size() == 7);
  CHECK(window(*overlapping, 6) == std::pair<std::string, std::string>{"ghi", "hij"});
  // Bytes above 127 (UTF-8) are ids 128..255, not negative.
  write_text(dir / "u.txt", "\xc3\xa9t\xc3\xa9");
  auto utf8 = dataset_from("{type: text, path: u.txt, block_size: 4}", dir.path());
  CHECK(window(*utf8, 0).first == "\xc3\xa9t\xc3");
  std::vector<float> u(4);
  std::vector<int32_t> ul(4);
  utf8->get_f32_labels(0, u.data(), ul.data());
  CHECK(u[0] == 195.0f);
  CHECK(ul[3] == 0xa9);
}

TEST_CASE("text: range cuts the text into disjoint parts (train and validation never share a byte)") {
  TempDir dir;
  write_text(dir / "t.txt", "0123456789abcdefghij");  // 20 bytes
  auto train = dataset_from("{type: text, path: t.txt, block_size: 4, range: [0.0, 0.5]}", dir.path());
  auto val = dataset_from("{type: text, path: t.txt, block_size: 4, range: [0.5, 1.0]}", dir.path());
  REQUIRE(train->size() == 2);  // "0123456789": windows of 5 at 0 and 4
  CHECK(window(*train, 1) == std::pair<std::string, std::string>{"4567", "5678"});
  REQUIRE(val->size() == 2);
  CHECK(window(*val, 0) == std::pair<std::string, std::string>{"abcd", "bcde"});
  CHECK(val->describe() == "text " + dir / "t.txt" + " bytes [10, 20) of 20: 2 windows of 4 bytes (stride 4), 10 bytes");
  CHECK_THAT(error_of<cfg::ConfigError>([&] {
               dataset_from("{type: text, path: t.txt, block_size: 4, range: [0.5, 0.5]}", dir.path());
             }),
             Catch::Contains("test.yaml:1:") && Catch::Contains("0 <= from < to <= 1, got [0.5, 0.5]"));
  CHECK_THAT(error_of<cfg::ConfigError>(
                 [&] { dataset_from("{type: text, path: t.txt, block_size: 4, range: 0.5}", dir.path()); }),
             Catch::Contains("'range' must be [from, to]"));
}

TEST_CASE("text: a folder's files matching the pattern, in name order, and binary files refused with path and offset") {
  TempDir dir;
  write_text(dir / "b.txt", "world");
  write_text(dir / "a.txt", "hello ");
  trainer::test::write_bytes(dir / "a.dat", {'x', 'y', 0, 1});
  auto ds = dataset_from("{type: text, path: ., pattern: '*.txt', block_size: 10}", dir.path());
  REQUIRE(ds->size() == 1);
  CHECK(window(*ds, 0) == std::pair<std::string, std::string>{"hello worl", "ello world"});
  CHECK_THAT(ds->describe(), Catch::Contains("(2 files '*.txt')"));
  CHECK_THAT(error_of<DataError>([&] { dataset_from("{type: text, path: ., block_size: 4}", dir.path()); }),
             Catch::Contains("a.dat: byte 0x00 at offset 2: not a text file (pattern '*' chooses the folder's files)"));
  CHECK_THAT(error_of<DataError>(
                 [&] { dataset_from("{type: text, path: ., pattern: '*.md', block_size: 4}", dir.path()); }),
             Catch::Contains("no file matches pattern '*.md'"));
  CHECK_THAT(error_of<DataError>([&] { dataset_from("{type: text, path: a.txt, block_size: 6}", dir.path()); }),
             Catch::Contains("a.txt: 6 bytes of text, fewer than one window of block_size + 1 = 7"));
  CHECK_THAT(error_of<DataError>([&] { dataset_from("{type: text, path: none.txt, block_size: 6}", dir.path()); }),
             Catch::Contains("none.txt: cannot open"));
  CHECK_THAT(error_of<cfg::ConfigError>([&] { dataset_from("{type: text, path: a.txt}", dir.path()); }),
             Catch::Contains("block_size"));
}

TEST_CASE("text: the Loader's batches hold labels [batch, block_size], shuffled with their windows") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i) text += char('A' + i % 26);
  write_text(dir / "t.txt", text);
  auto ds = dataset_from("{type: text, path: t.txt, block_size: 5, stride: 2}", dir.path());
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 3;
  o.workers = 1;
  Loader loader(ds, o);
  loader.start_epoch(0);
  int64_t seen = 0;
  for (Batch b; loader.next(b);) {
    REQUIRE(b.labels.shape() == Shape{b.size, 5});
    REQUIRE(b.images.shape() == Shape{b.size, 5});
    for (int64_t j = 0; j < b.size; ++j) {
      const int64_t start = b.indices[size_t(j)] * 2;
      for (int64_t t = 0; t < 5; ++t) {
        CHECK(b.images.f32()[j * 5 + t] == float(text[size_t(start + t)]));
        CHECK(b.labels.i32()[j * 5 + t] == text[size_t(start + t + 1)]);
      }
    }
    seen += b.size;
  }
  CHECK(seen == ds->size());
  CHECK(content_fingerprint(*ds) != content_fingerprint(*dataset_from("{type: text, path: t.txt, block_size: 5}",
                                                                       dir.path())));
}

namespace {

// An llm.c token shard: the 1024-byte header (magic, version, count) and the tokens.
void write_llmc(const std::string& path, const std::vector<uint16_t>& tokens, int32_t magic = 20240520) {
  std::vector<uint8_t> b(1024, 0);
  const int32_t header[3] = {magic, 1, int32_t(tokens.size())};
  std::memcpy(b.data(), header, sizeof header);
  const auto* t = reinterpret_cast<const uint8_t*>(tokens.data());
  b.insert(b.end(), t, t + tokens.size() * 2);
  trainer::test::write_bytes(path, b);
}

}  // namespace

TEST_CASE("tokens: llm.c shards and .npy ids, windows within a file, next-token labels, vocabulary checked") {
  TempDir dir;
  std::vector<uint16_t> a, b;
  for (uint16_t i = 0; i < 11; ++i) a.push_back(uint16_t(1000 + i));
  for (uint16_t i = 0; i < 6; ++i) b.push_back(uint16_t(50000 + i));
  write_llmc(dir / "shards/train_000.bin", a);
  write_llmc(dir / "shards/train_001.bin", b);
  auto ds = dataset_from("{type: tokens, path: 'shards/train_*.bin', block_size: 4, vocab: 50257}", dir.path());
  CHECK(ds->label_shape() == Shape{4});
  CHECK(ds->num_classes() == 50257);
  REQUIRE(ds->size() == 3);  // 11 tokens: windows at 0 and 4; 6 tokens: one at 0 (none spans the two files)
  std::vector<float> v(4);
  std::vector<int32_t> l(4);
  ds->get_f32_labels(1, v.data(), l.data());
  CHECK(v == std::vector<float>{1004, 1005, 1006, 1007});
  CHECK(l == std::vector<int32_t>{1005, 1006, 1007, 1008});
  ds->get_f32_labels(2, v.data(), l.data());
  CHECK(v == std::vector<float>{50000, 50001, 50002, 50003});
  CHECK(l == std::vector<int32_t>{50001, 50002, 50003, 50004});
  CHECK_THAT(ds->describe(), Catch::Contains("2 files") && Catch::Contains("3 windows of 4 tokens") &&
                                 Catch::Contains("17 tokens, vocabulary 50257"));
  // A folder: its .bin files; a token beyond the vocabulary: the file and the byte.
  auto small = dataset_from("{type: tokens, path: shards, block_size: 4, vocab: 50003}", dir.path());
  CHECK_THAT(error_of<DataError>([&] { small->get_f32_labels(2, v.data(), l.data()); }),
             Catch::Contains("train_001.bin: token 50003 at byte 1030 is outside the vocabulary (vocab: 50003)"));
  // .npy ids ('<u2', nanoGPT's), a bad magic, a count that disagrees with the file, too few tokens.
  const std::string h = npy::make_header({6}, "<u2");
  std::vector<uint8_t> npy(h.begin(), h.end());
  for (uint16_t t : {7, 8, 9, 10, 11, 12}) npy.push_back(uint8_t(t)), npy.push_back(0);
  trainer::test::write_bytes(dir / "ids.npy", npy);
  auto from_npy = dataset_from("{type: tokens, path: ids.npy, block_size: 2, stride: 1, vocab: 20}", dir.path());
  REQUIRE(from_npy->size() == 4);
  std::vector<float> v2(2);
  std::vector<int32_t> l2(2);
  from_npy->get_f32_labels(3, v2.data(), l2.data());
  CHECK(v2 == std::vector<float>{10, 11});
  CHECK(l2 == std::vector<int32_t>{11, 12});
  write_llmc(dir / "bad.bin", a, 12345);
  CHECK_THAT(error_of<DataError>([&] { dataset_from("{type: tokens, path: bad.bin, block_size: 4, vocab: 50257}", dir.path()); }),
             Catch::Contains("bad.bin: byte 0: magic 12345, not llm.c's 20240520"));
  write_llmc(dir / "cut.bin", a);
  std::filesystem::resize_file(dir / "cut.bin", 1024 + 10);
  CHECK_THAT(error_of<DataError>([&] { dataset_from("{type: tokens, path: cut.bin, block_size: 4, vocab: 50257}", dir.path()); }),
             Catch::Contains("cut.bin: byte 8: the header says 11 tokens (22 bytes from byte 1024), the file has 10"));
  CHECK_THAT(error_of<DataError>(
                 [&] { dataset_from("{type: tokens, path: shards/train_001.bin, block_size: 6, vocab: 50257}", dir.path()); }),
             Catch::Contains("no file holds one window of block_size + 1 = 7 tokens"));
  CHECK_THAT(error_of<DataError>([&] { dataset_from("{type: tokens, path: 'none_*.bin', block_size: 4, vocab: 9}", dir.path()); }),
             Catch::Contains("none_*.bin: no file matches"));
}
