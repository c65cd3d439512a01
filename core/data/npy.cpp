// `type: npy`: float samples from memory-mapped NumPy .npy arrays (one per model input) and labels.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/data/dataset.h"
#include "core/data/npy_format.h"
#include "core/data/util.h"

namespace trainer {

namespace {

// Keys:
//   x: x.npy                  one input: an array [N, ...] (sample i is x[i], of shape x.shape[1:];
//                             a 1-D array gives samples of shape [1])
//   inputs: [a.npy, b.npy]    several inputs instead (exactly one of x / inputs), each [N, ...]
//   labels: y.npy             [N] or [N, 1] integers ('|u1', '<i4', '<i8') in 0..classes-1; or [N, T]
//                             (T >= 2): a label per position (token models: the next token at each
//                             of a sample's T positions, for a model whose output is [T, classes])
//   classes: N                optional; default: the largest label + 1
// A label equal to train.ignore_class (a pad: -100 as PyTorch's ignore_index) is read whatever its
// value and counts toward no class.
// Inputs may be '<f4' (used as is), '<f8' (rounded to float) or '|u1', '<i4', '<i8' (converted).
// Paths are relative to the directory the command runs in. The files are mapped, not read: a
// set of hundreds of MB costs no load time, and the OS pages in what the loader touches.
struct Input {
  std::string name;  // as written in the config
  std::shared_ptr<const npy::File> file;
  Shape shape;       // per sample
  int64_t elements = 0;
};

std::string shape_text(const Shape& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.rank(); ++i) t += fmt::format("{}{}", i ? ", " : "", s[i]);
  return t + (s.rank() == 1 ? ",)" : ")");
}

class NpyDataset final : public FloatDataset {
 public:
  // `positions` labels per sample (1: one label each), labels.size() / positions samples.
  NpyDataset(std::vector<Input> inputs, std::string labels_name, std::vector<int32_t> labels, int64_t positions,
             int classes)
      : inputs_(std::move(inputs)), labels_name_(std::move(labels_name)), labels_(std::move(labels)),
        positions_(positions), classes_(classes) {
    for (const Input& in : inputs_) total_ += in.elements;
  }

  int64_t size() const override { return int64_t(labels_.size()) / positions_; }
  Shape label_shape() const override { return positions_ > 1 ? Shape{positions_} : Shape{}; }
  Shape sample_shape() const override { return inputs_.size() == 1 ? inputs_[0].shape : Shape{total_}; }
  std::vector<Shape> input_shapes() const override {
    std::vector<Shape> shapes;
    for (const Input& in : inputs_) shapes.push_back(in.shape);
    return shapes;
  }
  int num_classes() const override { return classes_; }
  std::string describe() const override {
    std::string names, shapes;
    for (const Input& in : inputs_) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", in.name);
      shapes += fmt::format("{}{}", shapes.empty() ? "" : " + ", shape_text(in.shape));
    }
    if (inputs_.size() > 1) names = "[" + names + "]";
    return fmt::format("npy {} (labels {}): {} samples of {}, {} classes", names, labels_name_, size(), shapes,
                       classes_);
  }

  int32_t get_f32(int64_t i, float* values) const override {
    if (i < 0 || i >= size()) throw std::out_of_range(fmt::format("{}: sample {} outside 0..{}", describe(), i, size() - 1));
    for (const Input& in : inputs_) {
      in.file->read_f32(i * in.elements, in.elements, values);
      values += in.elements;
    }
    return labels_[size_t(i * positions_)];
  }
  void get_f32_labels(int64_t i, float* values, int32_t* labels) const override {
    get_f32(i, values);
    std::copy_n(labels_.begin() + std::ptrdiff_t(i * positions_), positions_, labels);
  }

 private:
  std::vector<Input> inputs_;
  std::string labels_name_;
  std::vector<int32_t> labels_;
  int64_t positions_ = 1;
  int classes_;
  int64_t total_ = 0;
};

std::shared_ptr<Dataset> make_npy(cfg::MapReader& r, const DatasetContext& ctx) {
  r.allow({"x", "inputs", "labels", "classes"});
  r.finish();
  std::vector<std::string> names;
  if (r.has("x") && r.has("inputs"))
    r.optional("inputs").fail("give either 'x' (one input array) or 'inputs' (a list of arrays), not both");
  if (r.has("x")) {
    names.push_back(r.get<std::string>("x"));
  } else if (r.has("inputs")) {
    cfg::Node list = r.optional("inputs");
    if (!list.is_seq() || list.size() == 0)
      list.fail("'inputs' must be a non-empty list of .npy files, e.g. [a.npy, b.npy]");
    for (const cfg::Node& item : list.items()) names.push_back(item.as<std::string>());
  } else {
    r.node().fail(fmt::format("missing 'x' (one input array) or 'inputs' (a list of arrays) in {}", r.what()));
  }
  const std::string labels_name = r.get<std::string>("labels");
  std::optional<int64_t> classes;
  if (r.has("classes")) classes = r.get_int("classes", std::nullopt, 1, 1 << 24);

  std::vector<Input> inputs;
  for (const std::string& name : names) {
    Input in;
    in.name = name;
    in.file = std::make_shared<const npy::File>(data_util::resolve_path(ctx.base_dir, name));
    const std::vector<int64_t>& dims = in.file->header().shape;
    const std::string& path = in.file->path();
    if (dims.empty()) throw DataError(fmt::format("{}: holds a scalar, not an array of samples [N, ...]", path));
    if (dims[0] == 0)
      throw DataError(fmt::format("{}: holds no samples (shape {})", path, in.file->header().shape_str()));
    in.shape = dims.size() == 1 ? Shape{1} : Shape(std::vector<int64_t>(dims.begin() + 1, dims.end()));
    in.elements = in.file->count() / dims[0];
    if (in.elements == 0)
      throw DataError(fmt::format("{}: samples of shape {} hold no values", path, shape_text(in.shape)));
    if (!inputs.empty() && dims[0] != inputs[0].file->header().shape[0])
      throw DataError(fmt::format("{}: {} samples, {} has {}", path, dims[0], inputs[0].file->path(),
                                  inputs[0].file->header().shape[0]));
    inputs.push_back(std::move(in));
  }
  const int64_t n = inputs[0].file->header().shape[0];

  const npy::File y(data_util::resolve_path(ctx.base_dir, labels_name), {npy::Type::U1, npy::Type::I4, npy::Type::I8});
  const std::vector<int64_t>& ydims = y.header().shape;
  if (ydims.empty() || ydims.size() > 2 || (ydims.size() == 2 && ydims[1] == 0))
    throw DataError(fmt::format("{}: labels must be an array [N] or [N, 1] (or [N, T]: a label per position), not of "
                                "shape {}",
                                y.path(), y.header().shape_str()));
  if (ydims[0] != n)
    throw DataError(fmt::format("{}: {} labels, {} has {} samples", y.path(), ydims[0], inputs[0].file->path(), n));
  const int64_t positions = ydims.size() == 2 ? ydims[1] : 1;
  std::vector<int32_t> labels(static_cast<size_t>(n * positions));
  int64_t top = 0;
  for (int64_t i = 0; i < n * positions; ++i) {
    const int64_t v = y.read_int(i);
    const int64_t hi = classes ? *classes - 1 : (int64_t(1) << 24) - 1;
    const std::string at = positions > 1 ? fmt::format("sample {} position {}", i / positions, i % positions)
                                         : fmt::format("sample {}", i);
    if (ctx.ignore_class && v == *ctx.ignore_class) {
      labels[size_t(i)] = int32_t(v);
      continue;
    }
    if (v < 0 || v > hi)
      throw DataError(classes ? fmt::format("{}: {} has label {}, outside 0..{} (classes: {})", y.path(), at, v, hi,
                                            *classes)
                              : fmt::format("{}: {} has label {}, outside 0..{}", y.path(), at, v, hi));
    labels[size_t(i)] = int32_t(v);
    top = std::max(top, v);
  }
  return std::make_shared<NpyDataset>(std::move(inputs), labels_name, std::move(labels), positions,
                                      int(classes.value_or(top + 1)));
}

const bool registered = (register_dataset("npy", make_npy), true);

}  // namespace

}  // namespace trainer
