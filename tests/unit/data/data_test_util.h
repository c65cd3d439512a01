// Helpers for the data tests: temporary directories, file writers, datasets from YAML text.
#pragma once
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

}  // namespace trainer::test
