// `type: text`: byte-level language-model windows over a text file or a folder of them: each sample is block_size bytes (ids 0..255) labelled, at every position, by the byte that follows.
#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/data/dataset.h"
#include "core/data/util.h"

namespace trainer {
namespace {

// Keys:
//   path: corpus.txt    a file, or a folder whose files (matching `pattern`, by name order) are
//                       read one after the other
//   pattern: "*"        the folder's files to read (a shell pattern on the file name, e.g. "*.txt")
//   block_size: 256     bytes per sample: the model's input [block_size] of byte ids, and as many
//                       labels, the byte after each (a window of block_size + 1 bytes)
//   stride: block_size  bytes between the starts of consecutive windows (less: overlapping windows)
//   range: [0.0, 1.0]   the part of the text (all files, in order) this set reads, as fractions of
//                       its bytes: a training set [0, 0.9] and a validation set [0.9, 1] of one
//                       corpus never share a byte (cut at byte floor(f * size))
// No tokenizer: the 256 byte values are the vocabulary (UTF-8 text is learned byte by byte, as
// llm.c's and nanoGPT's character-level examples do). A held-out part is `data.validation_split`:
// the last windows, i.e. the end of the text (with stride < block_size the first of them share
// bytes with the last training windows; `range:` cuts without overlap). A file holding a NUL byte is refused as not text (a
// folder's binary files, e.g. fortune's .dat indexes, are left out by `pattern`).
constexpr int kVocabulary = 256;
constexpr uint64_t kMaxBytes = uint64_t(1) << 31;  // 2 GiB of text: window starts stay in int64, ids exact

class TextDataset final : public FloatDataset {
 public:
  TextDataset(std::vector<uint8_t> bytes, int64_t block, int64_t stride, std::string what)
      : bytes_(std::move(bytes)), block_(block), stride_(stride), what_(std::move(what)) {
    windows_ = (int64_t(bytes_.size()) - 1 - block_) / stride_ + 1;
  }
  int64_t size() const override { return windows_; }
  Shape sample_shape() const override { return Shape{block_}; }
  int num_classes() const override { return kVocabulary; }
  Shape label_shape() const override { return Shape{block_}; }
  std::string describe() const override {
    return fmt::format("text {}: {} windows of {} bytes (stride {}), {} bytes", what_, windows_, block_, stride_,
                       bytes_.size());
  }
  int32_t get_f32(int64_t i, float* values) const override {
    const uint8_t* w = window(i);
    for (int64_t t = 0; t < block_; ++t) values[t] = float(w[t]);
    return w[block_];
  }
  void get_f32_labels(int64_t i, float* values, int32_t* labels) const override {
    const uint8_t* w = window(i);
    for (int64_t t = 0; t < block_; ++t) {
      values[t] = float(w[t]);
      labels[t] = w[t + 1];
    }
  }

 private:
  const uint8_t* window(int64_t i) const {
    if (i < 0 || i >= windows_) throw std::out_of_range(fmt::format("{}: window {} of {}", what_, i, windows_));
    return bytes_.data() + i * stride_;
  }
  std::vector<uint8_t> bytes_;
  int64_t block_, stride_, windows_ = 0;
  std::string what_;
};

// The files `path` names: itself, or the folder's regular files (symbolic links followed) whose
// names match `pattern`, sorted by name.
std::vector<std::string> text_files(const std::string& path, const std::string& pattern) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec) throw DataError(fmt::format("{}: cannot open: {}", path, ec.message()));
  if (!fs::is_directory(st)) return {path};
  const std::vector<std::string> files =
      data_util::files_in(path, [&](const std::string& n) { return fnmatch(pattern.c_str(), n.c_str(), 0) == 0; });
  if (files.empty()) throw DataError(fmt::format("{}: no file matches pattern '{}'", path, pattern));
  return files;
}

std::shared_ptr<Dataset> make_text(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"path", "pattern", "block_size", "stride", "range"});
  r.finish();
  const std::string path = data_util::resolve_path(ctx.base_dir, r.get<std::string>("path"));
  const std::string pattern = r.has("pattern") ? r.get<std::string>("pattern") : "*";
  const int64_t block = r.get_int("block_size", std::nullopt, 1, int64_t(1) << 20);
  const int64_t stride = r.get_int("stride", block, 1, int64_t(1) << 30);

  double from = 0.0, to = 1.0;
  if (cfg::Node range = r.optional("range"); range.defined()) {
    if (!range.is_seq() || range.size() != 2) range.fail("'range' must be [from, to], fractions of the text, e.g. [0.9, 1.0]");
    from = range.at(0).as<double>();
    to = range.at(1).as<double>();
    if (!(from >= 0.0 && from < to && to <= 1.0))
      range.fail(fmt::format("'range' must satisfy 0 <= from < to <= 1, got [{}, {}]", from, to));
  }

  const std::vector<std::string> files = text_files(path, pattern);
  std::vector<uint8_t> bytes;
  for (const std::string& f : files) {
    const std::vector<uint8_t> part = data_util::read_file(f, kMaxBytes - bytes.size(), "text: 2 GiB in all");
    if (const void* nul = std::memchr(part.data(), 0, part.size()))
      throw DataError(fmt::format("{}: byte 0x00 at offset {}: not a text file{}", f,
                                  static_cast<const uint8_t*>(nul) - part.data(),
                                  files.size() > 1 ? fmt::format(" (pattern '{}' chooses the folder's files)", pattern)
                                                   : ""));
    bytes.insert(bytes.end(), part.begin(), part.end());
  }
  const size_t total = bytes.size();
  const size_t lo = size_t(double(total) * from), hi = to >= 1.0 ? total : size_t(double(total) * to);
  bytes = std::vector<uint8_t>(bytes.begin() + std::ptrdiff_t(lo), bytes.begin() + std::ptrdiff_t(hi));
  std::string what = files.size() > 1 ? fmt::format("{} ({} files '{}')", path, files.size(), pattern) : path;
  if (from > 0.0 || to < 1.0) what += fmt::format(" bytes [{}, {}) of {}", lo, hi, total);
  if (int64_t(bytes.size()) < block + 1)
    throw DataError(fmt::format("{}: {} bytes of text, fewer than one window of block_size + 1 = {}", what,
                                bytes.size(), block + 1));
  return std::make_shared<TextDataset>(std::move(bytes), block, stride, what);
}

const bool registered = (register_dataset("text", make_text), true);

}  // namespace
}  // namespace trainer
