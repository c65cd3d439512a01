// CRC-32C against its standard check values, TFRecord framing byte by byte, EventWriter's file read back, and a write that fails.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/io/crc32c.h"
#include "core/io/file.h"
#include "core/io/tensorboard.h"
#include "test_dirs.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& tag) { return trainer::test::test_dir("tb-" + tag); }

uint32_t u32_at(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

std::string only_file(const std::string& dir) {
  std::string found;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    found = e.path().string();
    ++n;
  }
  REQUIRE(n == 1);
  return found;
}

}  // namespace

TEST_CASE("crc32c: the standard check values (RFC 3720's and the catalogue's)") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // RFC 3720 B.4: 32 bytes of zeros, of 0xFF, and 0..31.
  std::string zeros(32, '\0'), ones(32, '\xFF'), inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[size_t(i)] = char(i);
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(inc.data(), 32) == 0x46DD794Eu);
  // Continuing over a split buffer equals one pass.
  CHECK(crc32c("56789", 5, crc32c("1234", 4)) == 0xE3069283u);
}

TEST_CASE("crc32c: TFRecord's mask rotates right by 15 and adds 0xa282ead8") {
  CHECK(mask_crc32c(0) == 0xa282ead8u);
  CHECK(mask_crc32c(0xE3069283u) == uint32_t(((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u));
  CHECK(mask_crc32c(1u << 15) == 1u + 0xa282ead8u);
}

TEST_CASE("tensorboard: a record is its length, the length's masked CRC, the data and the data's masked CRC") {
  const std::string data = "hello, tensorboard";
  const std::string r = frame_record(data);
  REQUIRE(r.size() == 8 + 4 + data.size() + 4);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(r[size_t(i)]);
  CHECK(n == data.size());
  CHECK(u32_at(r, 8) == mask_crc32c(crc32c(r.data(), 8)));
  CHECK(r.substr(12, data.size()) == data);
  CHECK(u32_at(r, 12 + data.size()) == mask_crc32c(crc32c(data.data(), data.size())));
  // An empty record is 16 bytes: a length of 0 and both CRCs.
  CHECK(frame_record("").size() == 16);
}

TEST_CASE("tensorboard: records read back — a flipped byte or a cut file stops the reading with where and why") {
  const std::string dir = fresh_dir("records");
  const std::string path = dir + "/r.tfrecord";
  std::string bytes = frame_record("first") + frame_record(std::string(300, 'x')) + frame_record("third");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  Records all = read_records(path);
  CHECK(all.error.empty());
  REQUIRE(all.records.size() == 3);
  CHECK(all.records[0] == "first");
  CHECK(all.records[1] == std::string(300, 'x'));
  CHECK(all.records[2] == "third");

  std::string flipped = bytes;
  flipped[21 + 12 + 100] ^= 0x01;  // in the second record's data
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(flipped.data(), 1, flipped.size(), f);
    std::fclose(f);
  }
  Records bad = read_records(path);
  CHECK(bad.records.size() == 1);
  CHECK_THAT(bad.error, Catch::Contains("record 1 at byte 21: data CRC"));

  flipped = bytes;
  flipped[21 + 3] ^= 0x01;  // the second record's length
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(flipped.data(), 1, flipped.size(), f);
    std::fclose(f);
  }
  CHECK_THAT(read_records(path).error, Catch::Contains("record 1 at byte 21: length CRC"));

  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size() - 3, f);  // the last CRC cut short (kill -9)
    std::fclose(f);
  }
  Records cut = read_records(path);
  CHECK(cut.records.size() == 2);
  CHECK_THAT(cut.error, Catch::Contains("record 2 at byte"));
  fs::remove_all(dir);
}

TEST_CASE("tensorboard: an events file is named as TensorFlow names them, and a second writer in the same second gets its own") {
  const std::string dir = fresh_dir("names");
  EventWriter a(dir + "/tb"), b(dir + "/tb");
  const std::string name = fs::path(a.path()).filename().string();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  std::string pid = ".";  // (not "." + to_string(): GCC 12's false -Wstringop-overflow at -O3)
  pid += std::to_string(::getpid());
  CHECK_THAT(name, Catch::EndsWith(pid));
  CHECK(a.path() != b.path());
  a.flush();
  Records r = read_records(a.path());
  CHECK(r.error.empty());
  CHECK(r.records.size() == 1);  // the file_version event
  CHECK(r.records[0].find("brain.Event:2") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("tensorboard: a fenced code block outlasts the backticks inside") {
  CHECK(markdown_code_block("a: 1\n", "yaml") == "```yaml\na: 1\n```\n");
  CHECK(markdown_code_block("a: 1", "yaml") == "```yaml\na: 1\n```\n");
  CHECK(markdown_code_block("s: '````'\n", "yaml") == "`````yaml\ns: '````'\n`````\n");
}

TEST_CASE("tensorboard: a write past the file size limit is a FileError naming the file and the reason") {
  const std::string dir = fresh_dir("full");
  // RLIMIT_FSIZE as a full disk: writes past it fail with EFBIG (SIGXFSZ ignored).
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string error, path;
  try {
    EventWriter w(dir + "/tb");
    path = w.path();
    for (int i = 0; i < 1000; ++i) w.scalars(i, {{"step/loss", 1.0 / (i + 1)}, {"step/lr", 0.1}});
    w.flush();
  } catch (const FileError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  CHECK(error == "cannot write " + path + ": " + std::strerror(EFBIG));
  // What reached the disk reads back up to the cut.
  Records r = read_records(only_file(dir + "/tb"));
  CHECK(r.records.size() > 10);
  fs::remove_all(dir);
}
