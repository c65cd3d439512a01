// Resource bombs: data files and configs that declare or expand to far more than they hold are refused in one line, fast, before allocating.
//
// Each row of bombs() writes its files into a fresh directory and runs `trainer run c.yaml` there
// as a direct child (cli.h's trainer_measured). It must exit 2 or 3 with exactly one stderr line
// naming the file and the reason, within 1 s, with a peak RSS within 100 MiB of the same binary
// refusing an empty config. Every row prints its figures (a WARN line). To add a row, append a
// Bomb: a name (no ';'), the config, a function writing the other files, and the texts the line
// must contain.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include "bad_inputs/corpus.h"
#include "bad_inputs/hostile_cases.h"
#include "cli.h"

#if defined(__SANITIZE_ADDRESS__)
#define TRAINER_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINER_UNDER_ASAN 1
#endif
#endif
#ifndef TRAINER_UNDER_ASAN
#define TRAINER_UNDER_ASAN 0
#endif

namespace fs = std::filesystem;
using bad_inputs::changed;

namespace {

struct Bomb {
  std::string name;
  std::string config;                                  // written as c.yaml
  std::function<void(const std::string& dir)> write;  // the bomb's files
  std::vector<std::string> expect;                     // each must occur in the one stderr line
};

void put(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  e2e::write_file(path, bytes);
}

std::string png_chunk(const std::string& kind, const std::string& body) {
  std::string kb = kind + body;
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(kb.data()), uInt(kb.size()));
  return bad_inputs::be32(uint32_t(body.size())) + kb + bad_inputs::be32(uint32_t(crc));
}

// A PNG whose IHDR declares width x height (8-bit RGB) and whose pixels are one empty IDAT.
std::string png_declaring(uint32_t width, uint32_t height) {
  const std::string ihdr = bad_inputs::be32(width) + bad_inputs::be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", "") + png_chunk("IEND", "");
}

// The fixture JPEG with its frame header (SOF0/SOF2) saying height x width.
std::string jpeg_declaring(uint16_t height, uint16_t width) {
  std::string j = bad_inputs::fixture("bird32x32.jpg");
  for (size_t i = 2; i + 9 < j.size(); ++i) {
    if (uint8_t(j[i]) == 0xff && (uint8_t(j[i + 1]) == 0xc0 || uint8_t(j[i + 1]) == 0xc2)) {
      j[i + 5] = char(height >> 8), j[i + 6] = char(height & 255), j[i + 7] = char(width >> 8), j[i + 8] = char(width & 255);
      return j;
    }
  }
  throw std::logic_error("bird32x32.jpg has no SOF0/SOF2 marker");
}

// A gzip file of `header` followed by `zeros` zero bytes (deflate shrinks them about 1000 times).
void gzip_zeros(const std::string& path, const std::string& header, size_t zeros) {
  gzFile f = gzopen(path.c_str(), "wb9");
  gzwrite(f, header.data(), unsigned(header.size()));
  const std::string chunk(1 << 20, '\0');
  for (size_t left = zeros; left > 0; left -= std::min(left, chunk.size()))
    gzwrite(f, chunk.data(), unsigned(std::min(left, chunk.size())));
  gzclose(f);
}

// Empty files imgs/a/00000000.png ... (as many as a test run can afford to create; the reader
// stops at the first, so a million behave the same).
constexpr int kEmptyFiles = 200000;

const std::string kImages = bad_inputs::kFolderModel;
const std::string kNpy = changed({{"  train: {type: synthetic, size: 16, image_size: 8, classes: 3}",
                                   "  train: {type: npy, x: x.npy, labels: y.npy}"}});
const std::string kInit = bad_inputs::kBase + "init: {from: w.safetensors}\n";

std::vector<Bomb> bombs() {
  const std::string png = bad_inputs::fixture("rgb4x4.png");
  return {
      {"PNG declaring 100000 x 100000 pixels", kImages,
       [](const std::string& d) { put(d + "/imgs/a/big.png", png_declaring(100000, 100000)); },
       {"imgs/a/big.png", "100000x100000"}},
      {"JPEG declaring 65000 x 65000 pixels", kImages,
       [](const std::string& d) { put(d + "/imgs/a/big.jpg", jpeg_declaring(65000, 65000)); },
       {"imgs/a/big.jpg", "65000x65000"}},
      {"JPEG past data.max_image_mb", kImages,
       [](const std::string& d) { put(d + "/imgs/a/big.jpg", jpeg_declaring(10000, 10000)); },
       {"imgs/a/big.jpg", "10000x10000", "data.max_image_mb (256)"}},
      {"PNG past a lowered data.max_image_mb", changed({{"augment: {flip: horizontal}", "augment: {flip: horizontal}\n  max_image_mb: 1"}}, kImages),
       [](const std::string& d) { put(d + "/imgs/a/big.png", png_declaring(1024, 1024)); },
       {"imgs/a/big.png", "1024x1024", "data.max_image_mb (1)"}},
      {"npy header declaring terabytes", kNpy,
       [](const std::string& d) {
         put(d + "/x.npy", bad_inputs::npy_declaring("(1000000, 1000000, 1000)", 64));
         put(d + "/y.npy", bad_inputs::npy_declaring("(4,)", 16));
       },
       {"x.npy", "1000000x1000000x1000"}},
      {"gzip IDX inflating 1000 times", bad_inputs::kMnistModel,
       [](const std::string& d) {
         gzip_zeros(d + "/img.idx", bad_inputs::idx_images(0x803, 65536, 32, 32, 0), size_t(65536) * 32 * 32);
         gzip_zeros(d + "/lab.idx", bad_inputs::idx_labels(65536, ""), 65536);
       },
       {"img.idx", "decompression bomb"}},
      {"safetensors offsets overlapping", kInit,
       [](const std::string& d) {
         put(d + "/w.safetensors", bad_inputs::safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                               R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 24));
       },
       {"w.safetensors", "overlaps"}},
      {"safetensors offsets past the end", kInit,
       [](const std::string& d) {
         put(d + "/w.safetensors",
             bad_inputs::safetensors(R"({"a":{"dtype":"F32","shape":[250000000000],"data_offsets":[0,1000000000000]}})", 16));
       },
       {"w.safetensors", "outside the data section"}},
      {"safetensors header length past the end", kInit,
       [](const std::string& d) { put(d + "/w.safetensors", std::string("\xff\xff\xff\xff\xff\0\0\0{}", 10)); },
       {"w.safetensors", "past the end of the file"}},
      {"image folder of 200000 empty files", kImages,
       [](const std::string& d) {
         fs::create_directories(d + "/imgs/a");
         char name[64];
         for (int i = 0; i < kEmptyFiles; ++i) {
           std::snprintf(name, sizeof name, "/imgs/a/%08d.png", i);
           const int fd = open((d + name).c_str(), O_WRONLY | O_CREAT, 0644);
           if (fd < 0) throw std::runtime_error("cannot create " + d + name);
           close(fd);
         }
       },
       {"imgs/a/", "empty file (0 bytes)"}},
      {"image folder that is a symlink loop", kImages,
       [](const std::string& d) { fs::create_directory_symlink("imgs", d + "/imgs"); },
       {"imgs", "Too many levels of symbolic links"}},
      {"image symlinks in a loop", kImages,
       [png](const std::string& d) {
         put(d + "/imgs/a/1.png", png);
         fs::create_directories(d + "/imgs/b");
         fs::create_symlink("y.png", d + "/imgs/b/x.png");
         fs::create_symlink("x.png", d + "/imgs/b/y.png");
       },
       {"imgs/b/", "Too many levels of symbolic links"}},
      {"image named file linked to /dev/zero", kImages,
       [png](const std::string& d) {
         put(d + "/imgs/a/1.png", png);
         fs::create_directories(d + "/imgs/b");
         fs::create_symlink("/dev/zero", d + "/imgs/b/zero.png");
       },
       {"imgs/b/zero.png", "not a regular file"}},
      // Configs that expand (core/io/config_bounds.cpp, core/graph/model_spec.cpp, graph.cpp).
      {"YAML alias bomb (billion laughs)", bad_inputs::alias_bomb(), [](const std::string&) {},
       {"c.yaml:22:8:", "expands to 597,871 values"}},
      {"lists nested 100000 deep", bad_inputs::nested(100000), [](const std::string&) {}, {"c.yaml:17:", "nest more than 64 deep"}},
      {"blocks of blocks expanding to 100000 layers", bad_inputs::block_bomb(5), [](const std::string&) {},
       {"more than 10000 layers"}},
      {"parameters of 4 TiB", bad_inputs::with_model("model:\n  input: [1048576]\n  layers:\n    - {type: dense, units: 1048576}\n"),
       [](const std::string&) {}, {"c.yaml:5:7:", "parameters reach 4096.0 GiB"}},
      {"a 5 MiB config", bad_inputs::kBase + "# " + std::string(5 << 20, 'x') + "\n", [](const std::string&) {},
       {"c.yaml:1:1:", "larger than 4 MiB"}},
  };
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

}  // namespace

TEST_CASE("bombs: each resource bomb is refused in one line, within 1 s and 100 MiB of an empty config's RSS") {
  // Catch runs the case once per section: the baseline is measured (and printed) once.
  static const e2e::Measured base = [] {
    const std::string dir = e2e::temp_dir("bomb-base");
    e2e::write_file(dir + "/c.yaml", "");
    e2e::Measured m = e2e::trainer_measured({"run", "c.yaml"}, dir);
    fs::remove_all(dir);
    WARN("bomb baseline (empty config): exit " << m.code << " in " << m.seconds << " s, peak RSS " << m.max_rss_mib
                                                << " MiB: " << m.err);
    return m;
  }();
  REQUIRE(base.code == 2);

  for (const Bomb& b : bombs()) {
    DYNAMIC_SECTION(b.name) {
      const std::string dir = e2e::temp_dir("bomb");
      e2e::write_file(dir + "/c.yaml", b.config);
      b.write(dir);
      const e2e::Measured m = e2e::trainer_measured({"run", "c.yaml"}, dir);
      WARN("bomb " << b.name << ": exit " << m.code << " in " << m.seconds << " s, peak RSS " << m.max_rss_mib
                   << " MiB (" << (m.max_rss_mib - base.max_rss_mib) << " MiB over the empty config's): " << m.err);
      CHECK((m.code == 2 || m.code == 3));
      CHECK(lines(m.err) == 1);
      for (const std::string& text : b.expect) CHECK(m.err.find(text) != std::string::npos);
#if TRAINER_UNDER_ASAN
      // Instrumented binaries are several times slower and larger, and a child's peak RSS also
      // counts the (here large) test process it was forked from: the release build checks the
      // bounds; under ASan only that nothing is read or allocated past them (ASan's own checks).
      WARN("bomb " << b.name << ": time and RSS bounds not checked under AddressSanitizer (the release build checks them)");
#else
      CHECK(m.seconds < 1.0);
      CHECK(m.max_rss_mib - base.max_rss_mib < 100.0);
#endif
      fs::remove_all(dir);
    }
  }
}
