// `type: mnist_idx`: MNIST-style IDX files (images + labels), raw or gzip-compressed.
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
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

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// A gzip file may declare at most this many times its own size once inflated, above a floor
// small enough to allocate whatever a file says. Real IDX data compresses 2-5x (MNIST's images
// 4.8x); a header claiming 1000x is corrupt or a decompression bomb, refused before inflating.
constexpr uint64_t kMaxGzipRatio = 100;
constexpr uint64_t kGzipFloor = uint64_t(16) << 20;

// One IDX file read through zlib (which passes plain files through unchanged): its header,
// whose size `check_header` derives from it (throwing DataError for a wrong magic or shape),
// then exactly that many payload bytes, never more. Returns header + payload.
struct IdxReader {
  std::string path;
  gzFile f = nullptr;
  uint64_t on_disk = 0;  // the file's size
  explicit IdxReader(std::string p) : path(std::move(p)) {
    InputFile in = data_util::as_data_error([&] { return InputFile(path); });
    on_disk = in.size();
    const int fd = in.release();
    f = gzdopen(fd, "rb");
    if (!f) {
      ::close(fd);
      throw DataError(fmt::format("{}: cannot open: {}", path, errno ? std::strerror(errno) : "gzdopen failed"));
    }
  }
  ~IdxReader() { gzclose(f); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // Up to n bytes appended to `out`; fewer only at the end of the data.
  void read(std::vector<uint8_t>& out, uint64_t n) {
    const size_t chunk = 1 << 20;
    while (n > 0) {
      const size_t at = out.size(), want = size_t(std::min<uint64_t>(n, chunk));
      out.resize(at + want);
      const int got = gzread(f, out.data() + at, unsigned(want));
      if (got < 0) {
        int code = 0;
        std::string msg = gzerror(f, &code);
        if (size_t at = msg.find(">: "); msg.rfind("<fd:", 0) == 0 && at != std::string::npos)
          msg.erase(0, at + 3);  // zlib prefixes "<fd:N>: " (gzdopen)
        throw DataError(fmt::format("{}: read error: {}", path, msg));
      }
      out.resize(at + size_t(got));
      if (size_t(got) < want) return;
      n -= uint64_t(got);
    }
  }
};

template <class CheckHeader>
std::vector<uint8_t> read_idx(const std::string& path, size_t header_bytes, CheckHeader check_header) {
  IdxReader in(path);
  std::vector<uint8_t> bytes;
  in.read(bytes, header_bytes);
  const uint64_t total = check_header(bytes);  // header + payload, as declared
  const uint64_t on_disk = in.on_disk;
  if (gzdirect(in.f) == 0 && total > std::max(kGzipFloor, on_disk * kMaxGzipRatio))
    throw DataError(fmt::format("{}: the header declares {} bytes, more than {} times the {} compressed bytes: a "
                                "corrupt header or a decompression bomb (not inflated)",
                                path, total, kMaxGzipRatio, on_disk));
  bytes.reserve(size_t(gzdirect(in.f) != 0 ? std::min(total, on_disk) : total));  // raw: what is there
  in.read(bytes, total - bytes.size());
  return bytes;
}

std::shared_ptr<Dataset> make_mnist_idx(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"images", "labels", "classes"});
  r.finish();
  const std::string images_given = r.get<std::string>("images");
  const std::string labels_given = r.get<std::string>("labels");
  const int classes = int(r.get_int("classes", 10, 1, 256));
  const std::string images_path = data_util::resolve_path(ctx.base_dir, images_given);
  const std::string labels_path = data_util::resolve_path(ctx.base_dir, labels_given);

  uint64_t n = 0, rows = 0, cols = 0;
  std::vector<uint8_t> img = read_idx(images_path, 16, [&](const std::vector<uint8_t>& h) {
    if (h.size() >= 4 && be32(&h[0]) != 2051)
      throw DataError(fmt::format("{}: not an IDX image file (magic 0x{:08x}, expected 0x00000803)", images_path,
                                  be32(&h[0])));
    if (h.size() < 16) throw DataError(fmt::format("{}: too short for an IDX image header", images_path));
    n = be32(&h[4]), rows = be32(&h[8]), cols = be32(&h[12]);
    if (rows == 0 || cols == 0 || rows > 65536 || cols > 65536)
      throw DataError(fmt::format("{}: implausible image size {}x{}", images_path, rows, cols));
    return 16 + n * rows * cols;  // < 2^64: n < 2^32, rows * cols <= 2^32
  });
  if (img.size() - 16 < n * rows * cols)
    throw DataError(fmt::format("{}: truncated at byte offset {} (header says {} images of {}x{} = {} bytes)",
                                images_path, img.size(), n, rows, cols, 16 + n * rows * cols));

  std::vector<uint8_t> lab = read_idx(labels_path, 8, [&](const std::vector<uint8_t>& h) {
    if (h.size() >= 4 && be32(&h[0]) != 2049)
      throw DataError(fmt::format("{}: not an IDX label file (magic 0x{:08x}, expected 0x00000801)", labels_path,
                                  be32(&h[0])));
    if (h.size() < 8) throw DataError(fmt::format("{}: too short for an IDX label header", labels_path));
    const uint64_t nl = be32(&h[4]);
    if (nl != n)
      throw DataError(fmt::format("{} has {} images but {} has {} labels", images_path, n, labels_path, nl));
    return 8 + nl;
  });
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
