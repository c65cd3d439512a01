// `type: image_folder`: JPEG/PNG files in class subfolders (Keras flow_from_directory / torchvision
// ImageFolder layout) or named by a file list; decoded in parallel into memory at open time when
// they fit the cache budget, else decoded on every access by the loader's workers.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/data/dataset.h"
#include "core/data/image.h"
#include "core/data/image_folder.h"
#include "core/data/memory_dataset.h"
#include "core/data/util.h"

namespace trainer {

namespace {

using image_folder::Entry;
using image_folder::Listing;

// Keys:
//   path: datasets/cifar10/train   required; relative paths are resolved against the run directory
//   files: train.txt               optional; a file list ("relative/path label" lines, see
//                                  image_folder.h) instead of class subfolders; relative to `path`
//   classes: [cat, dog]            optional, with files: only; fixes the class names and their order
//   image_size: [H, W]             optional; every image is resized (bilinear, antialiased) to it.
//                                  Without it all images must share one size.
//   limit_per_class: K             optional; only the first K files of each class (in listing order)
//   cache: auto                    auto (default): decode everything into memory once when the
//                                  decoded set fits the process's cache budget (half of physical
//                                  memory, or $TRAINER_CACHE_MB), otherwise decode on every access
//                                  in the loader's workers. true: always cache. false: never.
//   skip_corrupt: false            true: leave out files that cannot be decoded (corrupt, truncated,
//                                  not an image, unreadable) with one warning line counting them,
//                                  instead of a DataError at the first. Files are checked at open
//                                  (by decoding them once, also when not cached). The default is
//                                  DatasetContext::skip_corrupt (data.skip_corrupt).
// Images are JPEG or PNG, told by their content; every one becomes RGB (image.h says how).

enum class CacheMode { Auto, On, Off };

// An image of another size than the first: a configuration matter (image_size), never skipped.
struct OddSize : DataError {
  using DataError::DataError;
};

// An image file's bytes, refused past four times data.max_image_mb: no JPEG or PNG within that
// limit is larger (an uncompressed 16-bit RGBA PNG is 8/3 of its RGB size), and a huge file, or
// /dev/zero linked under an image's name, is not read into memory.
std::vector<uint8_t> read_image_file(const std::string& path, uint64_t max_image_bytes) {
  return data_util::read_file(path, 4 * max_image_bytes, "4 x data.max_image_mb");
}

// Decodes on every access (cache off, or the set does not fit the budget).
class LazyImageFolder final : public Dataset {
 public:
  LazyImageFolder(std::vector<Entry> entries, std::vector<std::string> classes, int h, int w, std::string desc,
                  uint64_t max_image_bytes)
      : entries_(std::move(entries)),
        classes_(std::move(classes)),
        h_(h),
        w_(w),
        desc_(std::move(desc)),
        max_image_bytes_(max_image_bytes) {}
  int64_t size() const override { return int64_t(entries_.size()); }
  bool grouped_by_class() const override { return true; }
  Shape sample_shape() const override { return Shape{h_, w_, 3}; }
  int num_classes() const override { return int(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  std::string describe() const override { return desc_; }
  int32_t get(int64_t i, uint8_t* pixels) const override {
    thread_local ImageDecoder decoder;
    decoder.set_max_bytes(max_image_bytes_);
    const Entry& e = entries_[size_t(i)];
    std::vector<uint8_t> bytes = read_image_file(e.path, max_image_bytes_);
    decoder.decode_rgb_resized(bytes.data(), bytes.size(), e.path, pixels, h_, w_);
    return e.label;
  }

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> classes_;
  int h_, w_;
  std::string desc_;
  uint64_t max_image_bytes_;
};

CacheMode read_cache_mode(cfg::MapReader& r) {
  cfg::Node n = r.optional("cache");
  if (!n.defined()) return CacheMode::Auto;
  const std::string s = n.scalar();
  if (s == "auto") return CacheMode::Auto;
  if (s == "true" || s == "false" || s == "yes" || s == "no" || s == "on" || s == "off")
    return n.as<bool>() ? CacheMode::On : CacheMode::Off;
  n.fail(fmt::format("'{}' must be true, false or auto, not '{}'", n.path(), s));
}

// Per-file failures when skipping corrupt files: message by entry index ("" = fine).
struct Failures {
  bool skip = false;
  std::vector<std::string> message;
  // Runs f; a DataError (not OddSize) is recorded for entry i when skipping, else rethrown.
  template <class F>
  void guard(int64_t i, F&& f) {
    if (!skip) return f();
    try {
      f();
    } catch (const OddSize&) {
      throw;
    } catch (const DataError& e) {
      message[size_t(i)] = e.what();
    }
  }
  bool failed(int64_t i) const { return skip && !message[size_t(i)].empty(); }
};

std::shared_ptr<Dataset> make_image_folder(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"path", "files", "classes", "image_size", "limit_per_class", "cache", "skip_corrupt"});
  r.finish();
  const std::string given = r.get<std::string>("path");
  const std::string root = data_util::resolve_path(ctx.base_dir, given);
  std::optional<std::pair<int, int>> size;
  if (r.has("image_size")) {
    size = r.get_pair("image_size", std::nullopt);
    if (size->first > 8192 || size->second > 8192) r.optional("image_size").fail("'image_size' is at most 8192");
  }
  std::optional<int64_t> limit;
  if (r.has("limit_per_class")) limit = r.get_int("limit_per_class", std::nullopt, 1, INT64_MAX);
  const CacheMode cache_mode = read_cache_mode(r);
  Failures failures;
  failures.skip = r.get<bool>("skip_corrupt", ctx.skip_corrupt);
  std::vector<std::string> classes;
  if (cfg::Node c = r.optional("classes"); c.defined()) {
    if (!r.has("files")) c.fail("'classes' goes with 'files' (with class subfolders, the folders are the classes)");
    for (const cfg::Node& item : c.items()) classes.push_back(item.as<std::string>());
    if (classes.empty()) c.fail("'classes' must name at least one class");
  }

  Listing listing;
  if (cfg::Node f = r.optional("files"); f.defined()) {
    const std::string list_path = data_util::resolve_path(root, f.as<std::string>());
    listing = image_folder::read_file_list(root, list_path, classes, limit);
  } else {
    listing = image_folder::scan_class_folders(root, limit);
  }
  std::vector<Entry>& entries = listing.entries;
  const int64_t n = int64_t(entries.size());
  failures.message.resize(size_t(n));
  const int threads = std::max(4, data_util::default_threads(16));  // file reads overlap with decoding

  // Without image_size the first readable file (in listing order) fixes the size all must have.
  int H = 0, W = 0;
  int64_t first = -1;
  if (size) {
    H = size->first, W = size->second;
  } else {
    ImageDecoder d;
    d.set_max_bytes(ctx.max_image_bytes);
    for (int64_t i = 0; i < n && first < 0; ++i) {
      failures.guard(i, [&] {
        std::vector<uint8_t> bytes = read_image_file(entries[size_t(i)].path, ctx.max_image_bytes);
        d.header(bytes.data(), bytes.size(), entries[size_t(i)].path, H, W);
        first = i;
      });
    }
  }
  auto check_size = [&](const Entry& e, int h, int w) {
    if (!size && (h != H || w != W))
      throw OddSize(fmt::format("{}: image is {}x{} (HxW) but {} is {}x{}; set image_size: [H, W] to resize all images",
                                e.path, h, w, entries[size_t(first)].path, H, W));
  };

  const size_t sample = size_t(H) * size_t(W) * 3;
  const uint64_t decoded = uint64_t(n) * sample;
  std::shared_ptr<const void> reservation;
  if (first >= 0 || size) {
    if (cache_mode != CacheMode::Off) reservation = data_util::reserve_cache(decoded, cache_mode == CacheMode::On);
  }
  std::vector<uint8_t> pixels;
  if (reservation) pixels.resize(size_t(decoded));
  // Decode everything now when caching or when corrupt files must be found; else check headers
  // (sizes must agree) or, with image_size, that the files exist.
  const bool decode_all = reservation || failures.skip;
  if (first >= 0 || size) {
    data_util::parallel_for(n, threads, [&](int64_t i) {
      thread_local ImageDecoder d;
      thread_local std::vector<uint8_t> scratch;
      d.set_max_bytes(ctx.max_image_bytes);
      const Entry& e = entries[size_t(i)];
      if (failures.failed(i)) return;  // already found bad while looking for the size
      failures.guard(i, [&] {
        if (!decode_all && size) {
          data_util::as_data_error([&] { InputFile{e.path}; });  // there, and a regular file (not a FIFO)
          return;
        }
        std::vector<uint8_t> bytes = read_image_file(e.path, ctx.max_image_bytes);
        int h = 0, w = 0;
        d.header(bytes.data(), bytes.size(), e.path, h, w);
        check_size(e, h, w);
        if (!decode_all) return;
        uint8_t* out = reservation ? &pixels[size_t(i) * sample] : (scratch.resize(sample), scratch.data());
        d.decode_rgb_resized(bytes.data(), bytes.size(), e.path, out, H, W);
      });
    });
  }

  // Leave out the failures, keeping the order.
  int64_t skipped = 0, kept = 0;
  std::string first_failure;
  for (int64_t i = 0; i < n; ++i) {
    if (failures.failed(i)) {
      if (skipped++ == 0) first_failure = failures.message[size_t(i)];
      continue;
    }
    if (kept != i) {
      entries[size_t(kept)] = std::move(entries[size_t(i)]);
      if (reservation) std::copy_n(&pixels[size_t(i) * sample], sample, &pixels[size_t(kept) * sample]);
    }
    ++kept;
  }
  entries.resize(size_t(kept));
  if (kept == 0) throw DataError(fmt::format("{}: none of the {} images could be decoded; first: {}", root, n, first_failure));
  if (skipped > 0)
    data_warning(fmt::format("image_folder {}: skipped {} corrupt file{}, first: {}", given, skipped,
                             skipped == 1 ? "" : "s", first_failure));

  std::string desc = fmt::format("image_folder {}: {} images, {} classes, {}x{}x3", given, kept,
                                 listing.classes.size(), H, W);
  if (skipped > 0) desc += fmt::format(", {} corrupt skipped", skipped);
  if (reservation) {
    desc += fmt::format(" (cached, {})", data_util::format_bytes(uint64_t(kept) * sample));
  } else if (cache_mode == CacheMode::Off) {
    desc += " (decoded per access: cache: false)";
  } else {
    desc += fmt::format(" (decoded per access: {} decoded exceeds the {} left of the cache budget)",
                        data_util::format_bytes(decoded), data_util::format_bytes(data_util::cache_budget_left()));
  }
  if (!reservation)
    return std::make_shared<LazyImageFolder>(std::move(entries), std::move(listing.classes), H, W, desc,
                                             ctx.max_image_bytes);
  pixels.resize(size_t(kept) * sample);
  std::vector<int32_t> labels(static_cast<size_t>(kept));
  for (int64_t i = 0; i < kept; ++i) labels[size_t(i)] = entries[size_t(i)].label;
  auto ds = std::make_shared<MemoryDataset>(Shape{H, W, 3}, int(listing.classes.size()), std::move(pixels),
                                            std::move(labels), desc, std::move(listing.classes));
  ds->hold(std::move(reservation));
  ds->set_grouped_by_class(true);
  return ds;
}

const bool registered = (register_dataset("image_folder", make_image_folder), true);

}  // namespace

}  // namespace trainer
