// Helpers for the data tests: temporary directories, file writers, datasets from YAML text.
#pragma once
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/io/config.h"
#include "skip.h"

namespace trainer::test {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trainer-data-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// Encodes packed RGB (channels 3) or grayscale (channels 1) pixels as a JPEG file.
inline void write_jpeg(const std::string& path, const std::vector<uint8_t>& pixels, int h, int w, int channels,
                       int quality = 95) {
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(t, pixels.data(), w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &size,
                       channels == 1 ? TJSAMP_GRAY : TJSAMP_444, quality, 0);
  if (rc != 0) {
    std::string msg = tjGetErrorStr2(t);
    tjDestroy(t);
    throw std::runtime_error("tjCompress2: " + msg);
  }
  write_bytes(path, std::vector<uint8_t>(buf, buf + size));
  tjFree(buf);
  tjDestroy(t);
}

// Writes a PNG with libpng: `rows` holds height rows already packed as the PNG stores them for
// `color_type` and `bit_depth` (16-bit samples big-endian, sub-byte samples packed MSB first).
struct PngSpec {
  int height = 1, width = 1, color_type = PNG_COLOR_TYPE_RGB, bit_depth = 8;
  std::vector<uint8_t> rows;
  std::vector<png_color> palette;  // PNG_COLOR_TYPE_PALETTE
  std::vector<uint8_t> trns;       // palette alpha entries
  bool interlace = false;
};

inline std::vector<uint8_t> encode_png(const PngSpec& s) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::vector<uint8_t> out;
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, size_t n) {
        auto* o = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        o->insert(o->end(), data, data + n);
      },
      nullptr);
  png_set_IHDR(png, info, png_uint_32(s.width), png_uint_32(s.height), s.bit_depth, s.color_type,
               s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), int(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), int(s.trns.size()), nullptr);
  png_write_info(png, info);
  const size_t stride = s.rows.size() / size_t(s.height);
  std::vector<png_bytep> ptrs;
  for (int y = 0; y < s.height; ++y) ptrs.push_back(const_cast<png_bytep>(s.rows.data() + size_t(y) * stride));
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

inline void write_png(const std::string& path, const PngSpec& s) { write_bytes(path, encode_png(s)); }

// A dataset from a YAML mapping given as text, e.g. "{type: synthetic, size: 10}".
inline std::shared_ptr<Dataset> dataset_from(const std::string& yaml, const std::string& base_dir = "") {
  auto doc = cfg::parse_document("train: " + yaml, "test.yaml");
  return make_dataset(cfg::root(doc).child("train"), base_dir);
}

// The message of the exception `f` throws, or "" when it throws nothing.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// Where the shared real data lives: $TRAINER_DATA, else <repo>/../shared/data.
inline std::string data_dir() {
  if (const char* env = std::getenv("TRAINER_DATA"); env && *env) return env;
  return std::string(TRAINER_SOURCE_DIR) + "/../shared/data";
}

// A python that imports numpy ("python3" on the PATH, else /usr/bin/python3), or "" after
// recording a skip (Missing::Package) when neither does.
inline std::string numpy_python() {
  for (const char* p : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(p) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return p;
  record_skip(Missing::Package, "no python3 imports numpy (scripts/setup.sh installs python3-numpy)");
  return "";
}

}  // namespace trainer::test
