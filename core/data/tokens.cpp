// `type: tokens`: language-model windows over pre-tokenized token files (llm.c's .bin shards, or 1-D .npy arrays of ids), each position labelled by the next token.
#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/data/dataset.h"
#include "core/data/npy_format.h"
#include "core/data/util.h"

namespace trainer {
namespace {

// Keys:
//   path: data/fineweb_train_*.bin   a file, a folder (its .bin and .npy files), or a shell pattern
//                       on the file name (data/fineweb_train_*.bin); files in name order
//   block_size: 1024    tokens per sample (the model's input of ids, and as many next-token labels)
//   stride: block_size  tokens between the starts of consecutive windows
//   vocab: 50257        the vocabulary size (classes); a token id at or above it is a data error
// Formats: llm.c's shards (dev/data/data_common.py: a header of 256 int32, magic 20240520, version
// 1 with uint16 tokens or 2 with uint32 ones, then the token count; the tokens from byte 1024),
// and .npy arrays [N] of '<u2', '<i4' or '<i8' ids (nanoGPT's uint16 arrays saved with numpy).
// The files are mapped, not read. A window never spans two files (as llm.c's loader): each file
// gives floor((n - 1 - block_size) / stride) + 1 windows. Validation sets are files of their own
// (llm.c's fineweb_val_000000.bin), with `limit:` to bound them.
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeader = 256 * sizeof(int32_t);

struct Shard {
  std::string path;
  std::shared_ptr<const void> owner;  // the mapping (or npy::File) the tokens live in
  const uint8_t* data = nullptr;      // the first token
  size_t width = 2;                   // bytes per token: 2 (uint16), 4 (uint32 / int32), 8 (int64)
  size_t data_offset = 0;             // of the first token in the file, for messages
  int64_t count = 0;                  // tokens
  int64_t windows = 0;
};

int64_t token_at(const Shard& s, int64_t i) {
  const uint8_t* p = s.data + size_t(i) * s.width;
  switch (s.width) {
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case 4: { int32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int64_t v; std::memcpy(&v, p, 8); return v; }
  }
}

// An llm.c shard, mapped: its header checked against the file's size.
Shard open_bin(const std::string& path) {
  const data_util::MappedFile m = data_util::map_file(path);
  const size_t size = m.size;
  if (size < kLlmcHeader)
    throw DataError(fmt::format("{}: {} bytes, shorter than llm.c's {}-byte header", path, size, kLlmcHeader));
  Shard s;
  s.path = path;
  s.owner = m.owner;
  const uint8_t* base = m.data;
  int32_t header[3];
  std::memcpy(header, base, sizeof header);
  if (header[0] != kLlmcMagic)
    throw DataError(fmt::format("{}: byte 0: magic {}, not llm.c's {} (a .bin token shard: dev/data/data_common.py)", path,
                                header[0], kLlmcMagic));
  if (header[1] != 1 && header[1] != 2)
    throw DataError(fmt::format("{}: byte 4: version {}, not 1 (uint16 tokens) or 2 (uint32 tokens)", path, header[1]));
  s.width = header[1] == 1 ? 2 : 4;
  s.count = header[2];
  s.data_offset = kLlmcHeader;
  if (header[2] < 0 || size - kLlmcHeader != size_t(header[2]) * s.width)
    throw DataError(fmt::format("{}: byte 8: the header says {} tokens ({} bytes from byte {}), the file has {}", path,
                                header[2], int64_t(header[2]) * int64_t(s.width), kLlmcHeader, size - kLlmcHeader));
  s.data = base + kLlmcHeader;
  return s;
}

Shard open_npy(const std::string& path) {
  auto f = std::make_shared<const npy::File>(path, std::vector<npy::Type>{npy::Type::U2, npy::Type::I4, npy::Type::I8});
  if (f->header().shape.size() != 1)
    throw DataError(fmt::format("{}: token ids must be a 1-D array [N], not of shape {}", path, f->header().shape_str()));
  Shard s;
  s.path = path;
  s.width = npy::type_size(f->type());
  s.count = f->count();
  s.data_offset = f->header().data_offset;
  s.owner = f;  // the file's own reader keeps the mapping; tokens are read through it (data stays null)
  return s;
}

class TokenDataset final : public FloatDataset {
 public:
  TokenDataset(std::vector<Shard> shards, int64_t block, int64_t stride, int64_t vocab, std::string what)
      : shards_(std::move(shards)), block_(block), stride_(stride), vocab_(vocab), what_(std::move(what)) {
    for (Shard& s : shards_) {
      s.windows = s.count >= block_ + 1 ? (s.count - 1 - block_) / stride_ + 1 : 0;
      first_.push_back(total_);
      total_ += s.windows;
    }
  }
  int64_t size() const override { return total_; }
  Shape sample_shape() const override { return Shape{block_}; }
  int num_classes() const override { return int(vocab_); }
  Shape label_shape() const override { return Shape{block_}; }
  std::string describe() const override {
    int64_t tokens = 0;
    for (const Shard& s : shards_) tokens += s.count;
    return fmt::format("tokens {}: {} windows of {} tokens (stride {}), {} tokens, vocabulary {}", what_, total_, block_,
                       stride_, tokens, vocab_);
  }
  int32_t get_f32(int64_t i, float* values) const override {
    std::vector<int32_t> labels(static_cast<size_t>(block_));
    get_f32_labels(i, values, labels.data());
    return labels.back();
  }
  void get_f32_labels(int64_t i, float* values, int32_t* labels) const override {
    if (i < 0 || i >= total_) throw std::out_of_range(fmt::format("{}: window {} of {}", what_, i, total_));
    const size_t k = size_t(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) - 1;
    const Shard& s = shards_[k];
    const int64_t start = (i - first_[k]) * stride_;
    for (int64_t t = 0; t <= block_; ++t) {
      const int64_t id = token(s, start + t);
      if (t < block_) values[t] = float(id);
      if (t > 0) labels[t - 1] = int32_t(id);
    }
  }

 private:
  int64_t token(const Shard& s, int64_t i) const {
    const int64_t id = s.data ? token_at(s, i) : static_cast<const npy::File*>(s.owner.get())->read_int(i);
    if (id < 0 || id >= vocab_)
      throw DataError(fmt::format("{}: token {} at byte {} is outside the vocabulary (vocab: {})", s.path, id,
                                  s.data_offset + size_t(i) * s.width, vocab_));
    return id;
  }
  std::vector<Shard> shards_;
  std::vector<int64_t> first_;  // each shard's first window
  int64_t block_, stride_, vocab_, total_ = 0;
  std::string what_;
};

// The files `path` names: itself; a folder's .bin and .npy files; or the files matching a shell
// pattern in its last component. Sorted by name.
std::vector<std::string> token_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const std::string name = p.filename().string();
  const bool pattern = name.find_first_of("*?[") != std::string::npos;
  if (!pattern && !fs::is_directory(p, ec)) return {path};
  const std::vector<std::string> files =
      pattern ? data_util::files_in(p.parent_path().string(),
                                    [&](const std::string& n) { return fnmatch(name.c_str(), n.c_str(), 0) == 0; })
              : data_util::files_in(path, [](const std::string& n) {
                  const std::string ext = fs::path(n).extension().string();
                  return ext == ".bin" || ext == ".npy";
                });
  if (files.empty())
    throw DataError(pattern ? fmt::format("{}: no file matches", path) : fmt::format("{}: no .bin or .npy file", path));
  return files;
}

std::shared_ptr<Dataset> make_tokens(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"path", "block_size", "stride", "vocab"});
  r.finish();
  const std::string path = data_util::resolve_path(ctx.base_dir, r.get<std::string>("path"));
  const int64_t block = r.get_int("block_size", std::nullopt, 1, int64_t(1) << 20);
  const int64_t stride = r.get_int("stride", block, 1, int64_t(1) << 30);
  const int64_t vocab = r.get_int("vocab", std::nullopt, 2, int64_t(1) << 24);
  std::vector<Shard> shards;
  for (const std::string& f : token_files(path))
    shards.push_back(std::filesystem::path(f).extension() == ".npy" ? open_npy(f) : open_bin(f));
  const std::string what = shards.size() > 1 ? fmt::format("{} ({} files)", path, shards.size()) : path;
  auto ds = std::make_shared<TokenDataset>(std::move(shards), block, stride, vocab, what);
  if (ds->size() == 0)
    throw DataError(fmt::format("{}: no file holds one window of block_size + 1 = {} tokens", what, block + 1));
  return ds;
}

const bool registered = (register_dataset("tokens", make_tokens), true);

}  // namespace
}  // namespace trainer
