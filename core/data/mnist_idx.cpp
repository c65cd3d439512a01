// `type: mnist_idx`: MNIST-style IDX files (images + labels), raw or gzip-compressed.
#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "core/data/dataset.h"
#include "core/data/memory_dataset.h"
#include "core/data/util.h"

namespace trainer {

namespace {

// Keys:
//   images: datasets/mnist/train-images-idx3-ubyte.gz   required; raw or .gz (detected by content)
//   labels: datasets/mnist/train-labels-idx1-ubyte.gz   required
//   classes: 10                                         optional; labels must be below it
// Images (magic 2051 = 0x00000803: unsigned bytes, 3 dimensions N, rows, cols) become
// rows x cols x 1 samples; labels (magic 2049 = 0x00000801, 1 dimension N) one byte each.
// Fashion-MNIST and Kuzushiji-MNIST use the same format.

// Reads a whole file through zlib, which passes plain files through unchanged.
std::vector<uint8_t> read_maybe_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw DataError(fmt::format("{}: cannot open: {}", path, errno ? std::strerror(errno) : "gzopen failed"));
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    int n = gzread(f, buf.data(), unsigned(buf.size()));
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);  // zlib prefixes the path
      gzclose(f);
      throw DataError(fmt::format("{}: read error: {}", path, msg));
    }
    if (n == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  gzclose(f);
  return out;
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

std::shared_ptr<Dataset> make_mnist_idx(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"images", "labels", "classes"});
  r.finish();
  const std::string images_given = r.get<std::string>("images");
  const std::string labels_given = r.get<std::string>("labels");
  const int classes = int(r.get_int("classes", 10, 1, 256));
  const std::string images_path = data_util::resolve_path(ctx.base_dir, images_given);
  const std::string labels_path = data_util::resolve_path(ctx.base_dir, labels_given);

  std::vector<uint8_t> img = read_maybe_gz(images_path);
  if (img.size() >= 4 && be32(&img[0]) != 2051)
    throw DataError(fmt::format("{}: not an IDX image file (magic 0x{:08x}, expected 0x00000803)", images_path,
                                be32(&img[0])));
  if (img.size() < 16) throw DataError(fmt::format("{}: too short for an IDX image header", images_path));
  const uint64_t n = be32(&img[4]), rows = be32(&img[8]), cols = be32(&img[12]);
  if (rows == 0 || cols == 0 || rows > 65536 || cols > 65536)
    throw DataError(fmt::format("{}: implausible image size {}x{}", images_path, rows, cols));
  if (img.size() - 16 < n * rows * cols)
    throw DataError(fmt::format("{}: truncated at byte offset {} (header says {} images of {}x{} = {} bytes)",
                                images_path, img.size(), n, rows, cols, 16 + n * rows * cols));

  std::vector<uint8_t> lab = read_maybe_gz(labels_path);
  if (lab.size() >= 4 && be32(&lab[0]) != 2049)
    throw DataError(fmt::format("{}: not an IDX label file (magic 0x{:08x}, expected 0x00000801)", labels_path,
                                be32(&lab[0])));
  if (lab.size() < 8) throw DataError(fmt::format("{}: too short for an IDX label header", labels_path));
  const uint64_t nl = be32(&lab[4]);
  if (nl != n)
    throw DataError(fmt::format("{} has {} images but {} has {} labels", images_path, n, labels_path, nl));
  if (lab.size() - 8 < n)
    throw DataError(fmt::format("{}: truncated at byte offset {} (header says {} labels)", labels_path, lab.size(), n));

  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    labels[i] = lab[8 + i];
    if (labels[i] >= classes)
      throw DataError(fmt::format("{}: label {} at byte offset {} is not below classes ({})", labels_path, labels[i],
                                  8 + i, classes));
  }
  img.erase(img.begin(), img.begin() + 16);
  img.resize(n * rows * cols);
  std::string desc = fmt::format("mnist_idx {}: {} images, {} classes, {}x{}x1", images_given, n, classes, rows, cols);
  return std::make_shared<MemoryDataset>(Shape{int64_t(rows), int64_t(cols), 1}, classes, std::move(img),
                                         std::move(labels), std::move(desc));
}

const bool registered = (register_dataset("mnist_idx", make_mnist_idx), true);

}  // namespace

}  // namespace trainer
