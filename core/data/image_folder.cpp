// `type: image_folder`: one subfolder per class of JPEG files (Keras flow_from_directory /
// torchvision ImageFolder layout), decoded in parallel into memory at open time.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

#include "core/data/dataset.h"
#include "core/data/image.h"
#include "core/data/memory_dataset.h"
#include "core/data/util.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {

// Keys:
//   path: datasets/cifar10/train   required; relative paths are resolved against the run directory
//   image_size: [H, W]             optional; every image is resized (bilinear) to it. Without it
//                                  all images must share one size.
//   limit_per_class: K             optional; only the first K files of each class (sorted by name)
//   cache: true                    decode everything into memory once (default). false: keep only
//                                  the file list and decode on every access (for sets too big for RAM).
// Classes are the subfolders (sorted by name, hidden ones skipped) -> labels 0, 1, ...; images are
// *.jpg / *.jpeg in any letter case, sorted by file name; other files are ignored.

struct Entry {
  std::string path;
  int32_t label;
};

bool is_jpeg_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg";
}

void scan(const std::string& root, std::optional<int64_t> limit_per_class, std::vector<std::string>& classes,
          std::vector<Entry>& entries) {
  std::error_code ec;
  if (!fs::exists(root, ec)) throw DataError(fmt::format("{}: no such directory", root));
  if (!fs::is_directory(root, ec)) throw DataError(fmt::format("{}: not a directory", root));
  try {
    for (const auto& e : fs::directory_iterator(root)) {
      std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && e.is_directory()) classes.push_back(name);
    }
    std::sort(classes.begin(), classes.end());
    if (classes.empty())
      throw DataError(fmt::format("{}: no class subfolders (expected {}/<class>/<image>.jpg)", root, root));
    for (size_t c = 0; c < classes.size(); ++c) {
      std::string dir = (fs::path(root) / classes[c]).string();
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(dir))
        if (is_jpeg_name(e.path()) && e.path().filename().string()[0] != '.' && !e.is_directory())
          files.push_back(e.path().filename().string());
      if (files.empty()) throw DataError(fmt::format("{}: class folder has no .jpg/.jpeg images", dir));
      std::sort(files.begin(), files.end());
      if (limit_per_class && int64_t(files.size()) > *limit_per_class) files.resize(size_t(*limit_per_class));
      for (const auto& f : files) entries.push_back({(fs::path(dir) / f).string(), int32_t(c)});
    }
  } catch (const fs::filesystem_error& e) {
    throw DataError(fmt::format("{}: {}", e.path1().string(), e.code().message()));
  }
}

std::string odd_size_message(const Entry& odd, int h, int w, const Entry& first, int h0, int w0) {
  return fmt::format("{}: image is {}x{} (HxW) but {} is {}x{}; set image_size: [H, W] to resize all images",
                     odd.path, h, w, first.path, h0, w0);
}

// Decodes on every access (cache: false).
class LazyImageFolder final : public Dataset {
 public:
  LazyImageFolder(std::vector<Entry> entries, std::vector<std::string> classes, int h, int w, std::string desc)
      : entries_(std::move(entries)), classes_(std::move(classes)), h_(h), w_(w), desc_(std::move(desc)) {}
  int64_t size() const override { return int64_t(entries_.size()); }
  Shape sample_shape() const override { return Shape{h_, w_, 3}; }
  int num_classes() const override { return int(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  std::string describe() const override { return desc_; }
  int32_t get(int64_t i, uint8_t* pixels) const override {
    thread_local JpegDecoder decoder;
    const Entry& e = entries_[size_t(i)];
    std::vector<uint8_t> bytes = data_util::read_file(e.path);
    decoder.decode_rgb_resized(bytes.data(), bytes.size(), e.path, pixels, h_, w_);
    return e.label;
  }

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> classes_;
  int h_, w_;
  std::string desc_;
};

std::shared_ptr<Dataset> make_image_folder(cfg::MapReader& r, const std::string& base_dir) {
  r.allow({"path", "image_size", "limit_per_class", "cache"});
  r.finish();
  const std::string given = r.get<std::string>("path");
  const std::string root = data_util::resolve_path(base_dir, given);
  std::optional<std::pair<int, int>> size;
  if (r.has("image_size")) {
    size = r.get_pair("image_size", std::nullopt);
    if (size->first > 8192 || size->second > 8192) r.optional("image_size").fail("'image_size' is at most 8192");
  }
  std::optional<int64_t> limit;
  if (r.has("limit_per_class")) limit = r.get_int("limit_per_class", std::nullopt, 1, INT64_MAX);
  const bool cache = r.get<bool>("cache", true);

  std::vector<std::string> classes;
  std::vector<Entry> entries;
  scan(root, limit, classes, entries);
  const int64_t n = int64_t(entries.size());
  const int threads = std::max(4, data_util::default_threads(16));  // file reads overlap with decoding

  // Without image_size the first file (in sorted order) fixes the size every other must have.
  int H = 0, W = 0;
  if (size) {
    H = size->first, W = size->second;
  } else {
    JpegDecoder d;
    std::vector<uint8_t> bytes = data_util::read_file(entries[0].path);
    d.header(bytes.data(), bytes.size(), entries[0].path, H, W);
  }
  auto check_size = [&](const Entry& e, int h, int w) {
    if (!size && (h != H || w != W)) throw DataError(odd_size_message(e, h, w, entries[0], H, W));
  };
  const std::string desc = fmt::format("image_folder {}: {} images, {} classes, {}x{}x3{}", given, n,
                                       classes.size(), H, W, cache ? "" : " (not cached)");

  if (!cache) {
    if (!size) {  // check every file's size now rather than failing mid-training
      data_util::parallel_for(n, threads, [&](int64_t i) {
        thread_local JpegDecoder d;
        const Entry& e = entries[size_t(i)];
        std::vector<uint8_t> bytes = data_util::read_file(e.path);
        int h = 0, w = 0;
        d.header(bytes.data(), bytes.size(), e.path, h, w);
        check_size(e, h, w);
      });
    }
    return std::make_shared<LazyImageFolder>(std::move(entries), std::move(classes), H, W, desc);
  }

  const size_t sample = size_t(H) * size_t(W) * 3;
  std::vector<uint8_t> pixels(size_t(n) * sample);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  data_util::parallel_for(n, threads, [&](int64_t i) {
    thread_local JpegDecoder d;
    const Entry& e = entries[size_t(i)];
    std::vector<uint8_t> bytes = data_util::read_file(e.path);
    int h = 0, w = 0;
    d.header(bytes.data(), bytes.size(), e.path, h, w);
    check_size(e, h, w);
    d.decode_rgb_resized(bytes.data(), bytes.size(), e.path, &pixels[size_t(i) * sample], H, W);
    labels[size_t(i)] = e.label;
  });
  return std::make_shared<MemoryDataset>(Shape{H, W, 3}, int(classes.size()), std::move(pixels), std::move(labels),
                                         desc, std::move(classes));
}

const bool registered = (register_dataset("image_folder", make_image_folder), true);

}  // namespace

}  // namespace trainer
