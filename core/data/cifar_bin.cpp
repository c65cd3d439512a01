// `type: cifar10_bin` and `type: cifar100_bin`: the CIFAR binary releases (fixed-size records).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <filesystem>
#include <sstream>

#include "core/data/dataset.h"
#include "core/data/memory_dataset.h"
#include "core/data/util.h"
#include "core/io/file.h"

namespace trainer {

namespace {

// cifar10_bin keys:
//   path: datasets/cifar-10-batches-bin   required; the directory cifar-10-binary.tar.gz unpacks to
//   split: train                          train (data_batch_1..5.bin) | test (test_batch.bin)
// Records: 1 label byte (0..9), then 3072 bytes: the red, green and blue 32x32 planes (CHW),
// converted to HWC. Class names come from batches.meta.txt when present.
//
// cifar100_bin keys:
//   path: datasets/cifar-100-binary       required; the directory cifar-100-binary.tar.gz unpacks to
//   split: train                          train (train.bin) | test (test.bin)
//   label: fine                           fine (100 classes) | coarse (20 superclasses)
// Records: 2 label bytes (coarse 0..19, fine 0..99), then the same 3072 pixel bytes. Class names
// come from fine_label_names.txt / coarse_label_names.txt when present.
constexpr int kSide = 32, kPlane = kSide * kSide, kPixels = 3 * kPlane;
constexpr uint64_t kMaxRecords = 60000;              // all of CIFAR-10 or CIFAR-100 in one file
constexpr uint64_t kMaxNamesBytes = uint64_t(1) << 20;  // 100 class names

struct Format {
  std::string type;                 // for messages
  std::vector<std::string> files;   // in order
  int label_bytes;                  // 1 (CIFAR-10) or 2 (CIFAR-100)
  int label_offset;                 // which of them is the label
  int classes;
  std::string names_file;           // one class name per line
};

// Class names, one a line: none when the file is absent (or holds fewer than `classes`).
std::vector<std::string> read_class_names(const std::string& dir, const std::string& file, int classes) {
  const std::string path = (std::filesystem::path(dir) / file).string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  std::istringstream in(data_util::as_data_error([&] { return InputFile(path).read_all(kMaxNamesBytes, "a class name list"); }));
  std::vector<std::string> names;
  std::string line;
  while (in && std::getline(in, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t b = 0;
    while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    if (b < line.size()) names.push_back(line.substr(b));
  }
  if (names.size() < size_t(classes)) return {};  // absent or not the file we expect
  names.resize(size_t(classes));
  return names;
}

std::shared_ptr<Dataset> read_cifar(const Format& f, const std::string& given, const std::string& dir,
                                    const std::string& what) {
  if (!std::filesystem::is_directory(dir))
    throw DataError(fmt::format("{}: no such directory (expected the {} files {} in it)", dir, f.type,
                                fmt::join(f.files, ", ")));
  const size_t record = size_t(f.label_bytes + kPixels);
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  for (const std::string& name : f.files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    // The size decides before a byte is read: whole records, at most kMaxRecords of them.
    const std::string bytes = data_util::as_data_error([&] {
      InputFile in(path);
      if (in.size() == 0) throw DataError(fmt::format("{}: empty file", path));
      if (in.size() % record != 0)
        throw DataError(fmt::format("{}: truncated at byte offset {} (records are {} bytes; the last is {} bytes short)",
                                    path, in.size(), record, record - in.size() % record));
      return in.read_all(kMaxRecords * record, fmt::format("{} records, all of {}", kMaxRecords, what));
    });
    if (bytes.size() % record != 0)  // it shrank while being read
      throw DataError(fmt::format("{}: truncated at byte offset {} (records are {} bytes)", path, bytes.size(), record));
    const size_t records = bytes.size() / record, base = labels.size();
    labels.resize(base + records);
    pixels.resize((base + records) * size_t(kPixels));
    for (size_t k = 0; k < records; ++k) {
      const auto* rec = reinterpret_cast<const uint8_t*>(&bytes[k * record]);
      const int label = rec[f.label_offset];
      if (label >= f.classes)
        throw DataError(fmt::format("{}: label {} at byte offset {} is not a {} class (0..{})", path, label,
                                    k * record + size_t(f.label_offset), what, f.classes - 1));
      labels[base + k] = label;
      const uint8_t* px = rec + f.label_bytes;
      uint8_t* out = &pixels[(base + k) * size_t(kPixels)];
      for (int p = 0; p < kPlane; ++p)
        for (int c = 0; c < 3; ++c) out[p * 3 + c] = px[c * kPlane + p];
    }
  }
  std::string desc = fmt::format("{} {}: {} images, {} classes, 32x32x3", f.type, given, labels.size(), f.classes);
  return std::make_shared<MemoryDataset>(Shape{kSide, kSide, 3}, f.classes, std::move(pixels), std::move(labels),
                                         std::move(desc), read_class_names(dir, f.names_file, f.classes));
}

std::shared_ptr<Dataset> make_cifar10_bin(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"path", "split"});
  r.finish();
  const std::string given = r.get<std::string>("path");
  const std::string split = r.get_choice("split", {"train", "test"}, "train");
  Format f{"cifar10_bin", {}, 1, 0, 10, "batches.meta.txt"};
  if (split == "train") {
    for (int i = 1; i <= 5; ++i) f.files.push_back(fmt::format("data_batch_{}.bin", i));
  } else {
    f.files.push_back("test_batch.bin");
  }
  return read_cifar(f, fmt::format("{} ({})", given, split), data_util::resolve_path(ctx.base_dir, given), "CIFAR-10");
}

std::shared_ptr<Dataset> make_cifar100_bin(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"path", "split", "label"});
  r.finish();
  const std::string given = r.get<std::string>("path");
  const std::string split = r.get_choice("split", {"train", "test"}, "train");
  const std::string label = r.get_choice("label", {"fine", "coarse"}, "fine");
  const bool fine = label == "fine";
  Format f{"cifar100_bin", {split + ".bin"}, 2, fine ? 1 : 0, fine ? 100 : 20,
           fine ? "fine_label_names.txt" : "coarse_label_names.txt"};
  return read_cifar(f, fmt::format("{} ({}, {} labels)", given, split, label), data_util::resolve_path(ctx.base_dir, given),
                    fine ? "CIFAR-100 fine" : "CIFAR-100 coarse");
}

const bool registered = (register_dataset("cifar10_bin", make_cifar10_bin),
                         register_dataset("cifar100_bin", make_cifar100_bin), true);

}  // namespace

}  // namespace trainer
