// Reading `trainer predict`'s inputs: images decoded and resized, folders listed, .npy batches checked.
#include "core/run/predict_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "core/data/image_folder.h"
#include "core/data/memory_dataset.h"
#include "core/data/npy_format.h"
#include "core/io/file.h"
#include "core/io/printable.h"

namespace trainer {
namespace {

namespace fs = std::filesystem;

// Float samples held in memory (sequence models): each the concatenation of the inputs' values.
class ArraySet final : public FloatDataset {
 public:
  ArraySet(std::vector<Shape> shapes, int64_t per_sample, std::vector<float> values)
      : shapes_(std::move(shapes)), per_(per_sample), values_(std::move(values)) {}
  int64_t size() const override { return per_ ? int64_t(values_.size()) / per_ : 0; }
  Shape sample_shape() const override { return shapes_.size() == 1 ? shapes_[0] : Shape{per_}; }
  int num_classes() const override { return 1; }
  std::string describe() const override { return fmt::format("{} arrays", size()); }
  std::vector<Shape> input_shapes() const override { return shapes_; }
  int32_t get_f32(int64_t i, float* out) const override {
    std::copy_n(values_.data() + i * per_, per_, out);
    return 0;
  }

 private:
  std::vector<Shape> shapes_;
  int64_t per_;
  std::vector<float> values_;
};

// A path as one printable line.
std::string shown(const std::string& p) { return printable(p); }

// Image files of a folder and its subfolders (hidden ones skipped, links to folders not followed),
// sorted by path.
std::vector<std::string> folder_images(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw FileError(fmt::format("{}: cannot list: {}", shown(dir), ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) throw FileError(fmt::format("{}: cannot list: {}", shown(dir), ec.message()));
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec) && image_folder::is_image_name(name)) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Collector {
  std::vector<Shape> shapes;
  bool images = false;  // one [H, W, C] input: pixels
  int64_t per_sample = 0;
  ImageDecoder decoder;
  std::vector<uint8_t> pixels;
  std::vector<float> values;
  PredictInputs out;

  void image(const std::string& path) {
    const int h = int(shapes[0][0]), w = int(shapes[0][1]);
    if (shapes[0][2] != 3) {
      out.failed.push_back(fmt::format("{}: the model takes {}-channel images: give them as a .npy of uint8 pixels {}",
                                       shown(path), shapes[0][2], shapes[0].str()));
      return;
    }
    try {
      std::string bytes = read_text_file(path, decoder.max_bytes() + (64u << 20), "data.max_image_mb");
      std::vector<uint8_t> one(static_cast<size_t>(per_sample));
      decoder.decode_rgb_resized(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), shown(path), one.data(), h, w);
      pixels.insert(pixels.end(), one.begin(), one.end());
      out.names.push_back(path);
    } catch (const DataError& e) {
      out.failed.push_back(e.what());
    } catch (const FileError& e) {
      out.failed.push_back(e.what());
    }
  }

  // A batch [N, ...sample] or one sample [...sample], by its element count.
  void npy_file(const std::string& path) {
    try {
      npy::File f(path);
      const std::vector<int64_t>& dims = f.header().shape;
      const int64_t count = f.count();
      const Shape one = images ? shapes[0] : Shape{per_sample};
      int64_t n = 0;
      if (images ? dims == one.dims() : count == per_sample) n = 1;
      else if (!dims.empty() && (images ? std::vector<int64_t>(dims.begin() + 1, dims.end()) == one.dims()
                                        : dims[0] > 0 && count == dims[0] * per_sample))
        n = dims[0];
      if (n == 0 && count > 0) {
        const std::string want = images ? fmt::format("[N, {}] or [{}]", fmt::join(one.dims(), ", "), fmt::join(one.dims(), ", "))
                                        : fmt::format("N x {} values (the model's inputs {})", per_sample, input_list());
        throw DataError(fmt::format("{}: holds an array of shape {}, the model takes {}", shown(path), f.header().shape_str(), want));
      }
      std::vector<float> v(static_cast<size_t>(count));
      if (count) f.read_f32(0, count, v.data());
      for (int64_t i = 0; i < n; ++i) out.names.push_back(fmt::format("{}[{}]", path, i));
      if (!images) {
        values.insert(values.end(), v.begin(), v.end());
        return;
      }
      for (size_t i = 0; i < v.size(); ++i)
        if (!(v[i] >= 0 && v[i] <= 255 && v[i] == std::floor(v[i]))) {
          out.names.resize(out.names.size() - size_t(n));
          throw DataError(fmt::format("{}: element {} is {}: image models take pixels, whole numbers 0..255", shown(path), i, v[i]));
        }
      for (float x : v) pixels.push_back(uint8_t(x));
    } catch (const DataError& e) {
      out.failed.push_back(e.what());
    } catch (const FileError& e) {
      out.failed.push_back(e.what());
    }
  }

  std::string input_list() const {
    std::vector<std::string> s;
    for (const Shape& x : shapes) s.push_back(x.str());
    return fmt::format("{}", fmt::join(s, ", "));
  }

  void input(const std::string& path) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) {
      out.failed.push_back(fmt::format("{}: no such file or folder", shown(path)));
      return;
    }
    const bool npy = path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
    if (fs::is_directory(st)) {
      if (!images) {
        out.failed.push_back(fmt::format("{}: is a folder; this model takes .npy arrays, not images", shown(path)));
        return;
      }
      std::vector<std::string> files;
      try {
        files = folder_images(path);
      } catch (const FileError& e) {
        out.failed.push_back(e.what());
        return;
      }
      if (files.empty()) out.failed.push_back(fmt::format("{}: holds no images (.jpg, .jpeg, .png)", shown(path)));
      for (const std::string& f : files) image(f);
    } else if (npy) {
      npy_file(path);
    } else if (images) {
      image(path);
    } else {
      out.failed.push_back(fmt::format("{}: this model takes .npy arrays of {} values per sample (inputs {}), not images",
                                       shown(path), per_sample, input_list()));
    }
  }
};

}  // namespace

PredictInputs read_predict_inputs(const std::vector<std::string>& inputs, const std::vector<Shape>& shapes,
                                  int64_t max_image_mb) {
  Collector c;
  c.shapes = shapes;
  c.images = shapes.size() == 1 && shapes[0].rank() == 3;
  c.per_sample = 0;
  for (const Shape& s : shapes) c.per_sample += s.numel();
  c.decoder.set_max_bytes(uint64_t(max_image_mb) << 20);
  for (const std::string& in : inputs) c.input(in);
  const int64_t n = int64_t(c.out.names.size());
  if (c.images) {
    std::vector<int32_t> labels(size_t(n), 0);
    c.out.samples = std::make_shared<MemoryDataset>(shapes[0], 1, std::move(c.pixels), std::move(labels),
                                                    fmt::format("{} images", n));
  } else {
    c.out.samples = std::make_shared<ArraySet>(shapes, c.per_sample, std::move(c.values));
  }
  return std::move(c.out);
}

}  // namespace trainer
