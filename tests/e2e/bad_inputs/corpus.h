// The bad-input corpus' rows (Case) and what writes them: the reference config, changed(), data files.
// The tables are in bad_inputs/*_cases.h, the runner in ../bad_inputs_test.cpp (which says how to add a row).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../cli.h"

// Rows name only the fields they set; GCC 12 still warns about the others under -Wextra.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace bad_inputs {

// The rows about GPUs that are not there hide every GPU, so that they hold on a GPU machine too.
const std::string kNoGpu = "CUDA_VISIBLE_DEVICES=";

// The reference config: trains (one short epoch) as written; each config case changes one thing.
// Line numbers matter to the expected messages.
const std::string kBase = R"(name: bad
model:
  input: [8, 8, 3]
  layers:
    - {name: conv, type: conv2d, filters: 4, kernel: 3}
    - {name: pool, type: max_pool2d}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 16, image_size: 8, classes: 3}
  augment: {flip: horizontal}
train: {epochs: 1, batch_size: 4}
optimizer: {type: sgd, lr: 0.01}
schedule: {type: constant}
devices: {cpu: 1}
)";

struct File {
  enum Kind { Plain, Fifo, Symlink };
  std::string path;    // relative to the case's directory; ending in '/': an empty folder
  std::string bytes;   // the content of a file; the target of a symlink
  Kind kind = Plain;   // Fifo: a named pipe no one writes to (mkfifo); Symlink: a link to `bytes`
};

inline File fifo(const std::string& path) { return {path, "", File::Fifo}; }
inline File symlink_to(const std::string& path, const std::string& target) { return {path, target, File::Symlink}; }

struct Case {
  std::string cat;              // category, for the count
  std::string name;
  std::string config;           // written as c.yaml when not empty
  std::vector<File> files;      // other files and folders
  std::string args = "run c.yaml";
  std::string env;              // environment assignments before the command (test hooks)
  int code = 2;
  std::string expect;           // the whole stderr line; "..." matches any text
  std::string why_excluded;     // not empty: a known problem in code this corpus does not own; run and
                                // reported (a WARN), not counted, until fixed
};

// kBase with each `from` fragment (which must occur exactly once) replaced by `to`.
inline std::string changed(const std::vector<std::pair<std::string, std::string>>& edits, std::string text = kBase) {
  for (const auto& [from, to] : edits) {
    size_t at = text.find(from);
    if (at == std::string::npos || text.find(from, at + 1) != std::string::npos)
      throw std::logic_error("corpus: fragment '" + from + "' does not occur exactly once in the config");
    text.replace(at, from.size(), to);
  }
  return text;
}

// A model section replacing kBase's (lines 2-9), e.g. for graph-structure cases.
inline std::string with_model(const std::string& model) {
  size_t b = kBase.find("model:"), e = kBase.find("data:");
  return kBase.substr(0, b) + model + kBase.substr(e);
}

inline std::string fixture(const std::string& name) {
  std::string p = TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/" + name;
  std::string s = e2e::read_file(p);
  if (s.empty()) throw std::logic_error("corpus: missing fixture " + p);
  return s;
}

inline std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16 & 255), char(v >> 8 & 255), char(v & 255)};
}

// IDX headers: images (magic 0x803, n, rows, cols) and labels (magic 0x801, n).
inline std::string idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t pixel_bytes) {
  return be32(magic) + be32(n) + be32(rows) + be32(cols) + std::string(pixel_bytes, '\x40');
}
inline std::string idx_labels(uint32_t n, const std::string& labels) { return be32(0x801) + be32(n) + labels; }

// A CIFAR-10 binary folder: five batch files of `records` records (label byte + 3072 pixels).
inline std::vector<File> cifar_folder(int records = 2, char label = 1) {
  std::vector<File> f;
  std::string rec = std::string(1, label) + std::string(3072, '\x7f');
  for (int i = 1; i <= 5; ++i) {
    std::string bytes;
    for (int k = 0; k < records; ++k) bytes += rec;
    f.push_back({"cifar/data_batch_" + std::to_string(i) + ".bin", bytes});
  }
  return f;
}

// A .npy file: a version 1 header with `descr` and `shape` (Python syntax), then `data_bytes` zero bytes.
inline std::string npy_declaring(const std::string& shape, size_t data_bytes, const std::string& descr = "<f4") {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  h.append(63 - (10 + h.size()) % 64, ' ');
  h += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 255) + char(h.size() >> 8) + h + std::string(data_bytes, '\0');
}

// A safetensors file with this JSON header (padded) and `data_bytes` bytes after it.
inline std::string safetensors(const std::string& json, size_t data_bytes) {
  std::string h = json;
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 255);
  return len + h + std::string(data_bytes, '\0');
}

const std::string kCifarModel = changed({{"input: [8, 8, 3]", "input: [32, 32, 3]"},
                                         {"units: 3", "units: 10"},
                                         {"  train: {type: synthetic, size: 16, image_size: 8, classes: 3}",
                                          "  train: {type: cifar10_bin, path: cifar}"}});
const std::string kMnistModel = changed({{"input: [8, 8, 3]", "input: [4, 4, 1]"},
                                         {"units: 3", "units: 10"},
                                         {"  train: {type: synthetic, size: 16, image_size: 8, classes: 3}",
                                          "  train: {type: mnist_idx, images: img.idx, labels: lab.idx}"},
                                         {"batch_size: 4", "batch_size: 2"}});
// Image folders of 4x4 images.
const std::string kFolderModel = changed({{"input: [8, 8, 3]", "input: [4, 4, 3]"},
                                          {"kernel: 3", "kernel: 1"},
                                          {"  train: {type: synthetic, size: 16, image_size: 8, classes: 3}",
                                           "  train: {type: image_folder, path: imgs}"},
                                          {"batch_size: 4", "batch_size: 2"}});

}  // namespace bad_inputs
