// `type: cifar10_bin`: the CIFAR-10 binary release (data_batch_1..5.bin, test_batch.bin).
#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/data/dataset.h"
#include "core/data/memory_dataset.h"
#include "core/data/util.h"

namespace trainer {

namespace {

// Keys:
//   path: datasets/cifar-10-batches-bin   required; the directory the release unpacks to
//   split: train                          train (data_batch_1..5.bin) | test (test_batch.bin)
// Each record is 1 label byte then 3072 bytes: the red, green and blue 32x32 planes (CHW), which
// are converted to HWC. Class names come from batches.meta.txt when present.
constexpr int kSide = 32, kPlane = kSide * kSide, kRecord = 1 + 3 * kPlane, kClasses = 10;

std::vector<std::string> read_class_names(const std::string& dir) {
  std::ifstream in((std::filesystem::path(dir) / "batches.meta.txt").string());
  std::vector<std::string> names;
  std::string line;
  while (in && std::getline(in, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t b = 0;
    while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    if (b < line.size()) names.push_back(line.substr(b));
  }
  if (names.size() < size_t(kClasses)) return {};  // absent or not the file we expect
  names.resize(kClasses);
  return names;
}

std::shared_ptr<Dataset> make_cifar10_bin(cfg::MapReader& r, const std::string& base_dir) {
  r.allow({"path", "split"});
  r.finish();
  const std::string given = r.get<std::string>("path");
  const std::string dir = data_util::resolve_path(base_dir, given);
  const std::string split = r.get_choice("split", {"train", "test"}, "train");
  std::vector<std::string> files;
  if (split == "train") {
    for (int i = 1; i <= 5; ++i) files.push_back(fmt::format("data_batch_{}.bin", i));
  } else {
    files.push_back("test_batch.bin");
  }
  if (!std::filesystem::is_directory(dir))
    throw DataError(fmt::format("{}: no such directory (expected the CIFAR-10 binary batches in it)", dir));

  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  for (const std::string& name : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::vector<uint8_t> bytes = data_util::read_file(path);
    if (bytes.empty()) throw DataError(fmt::format("{}: empty file", path));
    const size_t records = bytes.size() / kRecord;
    if (bytes.size() % kRecord != 0)
      throw DataError(fmt::format("{}: truncated at byte offset {} (records are {} bytes)", path, bytes.size(),
                                  kRecord));
    const size_t base = labels.size();
    labels.resize(base + records);
    pixels.resize((base + records) * size_t(3 * kPlane));
    for (size_t k = 0; k < records; ++k) {
      const uint8_t* rec = &bytes[k * kRecord];
      if (rec[0] >= kClasses)
        throw DataError(fmt::format("{}: label {} at byte offset {} is not a CIFAR-10 class (0..9)", path,
                                    int(rec[0]), k * kRecord));
      labels[base + k] = rec[0];
      uint8_t* out = &pixels[(base + k) * size_t(3 * kPlane)];
      for (int p = 0; p < kPlane; ++p)
        for (int c = 0; c < 3; ++c) out[p * 3 + c] = rec[1 + c * kPlane + p];
    }
  }
  std::string desc = fmt::format("cifar10_bin {} ({}): {} images, 10 classes, 32x32x3", given, split, labels.size());
  return std::make_shared<MemoryDataset>(Shape{kSide, kSide, 3}, kClasses, std::move(pixels), std::move(labels),
                                         std::move(desc), read_class_names(dir));
}

const bool registered = (register_dataset("cifar10_bin", make_cifar10_bin), true);

}  // namespace

}  // namespace trainer
