// Dataset: a random-access set of labelled samples (uint8 HWC images, or float arrays such as
// sequences); readers register by `type:` name.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/data/image.h"
#include "core/io/config.h"
#include "core/tensor/shape.h"

namespace trainer {

// Raised for unreadable or inconsistent data; the CLI prints it and exits 3.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;  // message names the path (and offset) at fault
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // H, W, C
  virtual int num_classes() const = 0;
  virtual std::vector<std::string> class_names() const;  // default: "0", "1", ...
  // Writes sample i's pixels (sample_shape().numel() bytes, HWC, uint8) and returns its label.
  // Must be safe to call from several threads at once.
  virtual int32_t get(int64_t i, uint8_t* pixels) const = 0;
  virtual std::string describe() const = 0;  // "image_folder datasets/cifar10/train: 50000 images, 10 classes"

  // Float samples (sequences, arrays): read with get_f32, not get(); no augmentation applies.
  virtual bool float_samples() const { return false; }
  // The arrays a sample is made of, one per model input (one for a single-input set). A float
  // sample is their concatenation, each flattened row-major; sample_shape() is the single shape
  // when there is one, else Shape{total elements}.
  virtual std::vector<Shape> input_shapes() const { return {sample_shape()}; }
  // Writes sample i's values (the total of input_shapes()' elements) and returns its label.
  // Thread-safe. The default throws std::logic_error (image sets).
  virtual int32_t get_f32(int64_t i, float* values) const;
  // The labels of one sample: {} for one label per sample; {T} for a label per position (a `text`
  // set: the next token after each of its T tokens), which a model scores with logits [T, classes].
  virtual Shape label_shape() const { return Shape{}; }
  // A float sample with its label_shape().numel() labels (thread-safe). The default writes the one
  // label get_f32 returns.
  virtual void get_f32_labels(int64_t i, float* values, int32_t* labels) const { labels[0] = get_f32(i, values); }
  // Sample i's labels alone (label_shape().numel() of them; thread-safe): what the loader reads of
  // the other replicas' samples to count a batch's scored labels under train.ignore_class. The
  // default reads the whole sample into a scratch buffer.
  virtual void get_labels(int64_t i, int32_t* labels) const;
  // Whether the samples come grouped by class (image_folder: a folder per class, listed in order):
  // validation_split then shuffles before it splits, as Keras's image_dataset_from_directory.
  virtual bool grouped_by_class() const { return false; }
};

// The base of float-sample sets: get() throws a DataError naming the set ("... has float samples
// (sequences, arrays), not uint8 images"), so image-only code paths fail clearly.
class FloatDataset : public Dataset {
 public:
  bool float_samples() const final { return true; }
  int32_t get(int64_t i, uint8_t* pixels) const final;
  int32_t get_f32(int64_t i, float* values) const override = 0;
};

// A view on some samples of another dataset (validation_split, limit:).
class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices, std::string what);
  int64_t size() const override { return int64_t(indices_.size()); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  std::vector<std::string> class_names() const override { return base_->class_names(); }
  int32_t get(int64_t i, uint8_t* pixels) const override { return base_->get(indices_[size_t(i)], pixels); }
  std::string describe() const override;
  bool float_samples() const override { return base_->float_samples(); }
  std::vector<Shape> input_shapes() const override { return base_->input_shapes(); }
  int32_t get_f32(int64_t i, float* values) const override { return base_->get_f32(indices_[size_t(i)], values); }
  Shape label_shape() const override { return base_->label_shape(); }
  void get_labels(int64_t i, int32_t* labels) const override { base_->get_labels(indices_[size_t(i)], labels); }
  bool grouped_by_class() const override { return base_->grouped_by_class(); }  // kept in the base's order
  void get_f32_labels(int64_t i, float* values, int32_t* labels) const override {
    base_->get_f32_labels(indices_[size_t(i)], values, labels);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
  std::string what_;
};

// Warnings from the readers (e.g. "skipped 3 corrupt files, first: path: reason"), one line each.
// By default printed to stderr as "warning: <line>"; the engine may send them to its log instead.
// The handler may be called from any thread (never from two at once).
using DataWarningHandler = std::function<void(const std::string& line)>;
void set_data_warning_handler(DataWarningHandler handler);  // an empty handler restores the default
void data_warning(const std::string& line);

// Readers: `type: synthetic | image_folder | cifar10_bin | cifar100_bin | mnist_idx` (images),
// `synthetic_sequences | npy` (float samples), each reading its own keys
// from the section (data.train / data.val) through a MapReader (unknown keys are config errors).
struct DatasetContext {
  std::string base_dir;       // resolves relative paths (the directory the command runs in)
  bool skip_corrupt = false;  // the default of image readers' own `skip_corrupt:` (data.skip_corrupt);
                              // record-file readers (cifar*, mnist) have nothing to skip  // data.max_image_mb: the most one decoded image may take (H x W x 3 bytes); larger files are
  // refused from their header, before anything is allocated (a DataError naming the file).
  uint64_t max_image_bytes = uint64_t(kDefaultMaxImageMb) << 20;
  // train.ignore_class: a label value readers accept whatever it is (a pad, e.g. -100) and leave
  // out of the class count; the loss scores none of them.
  std::optional<int32_t> ignore_class;
};
// The context the `data:` section gives: base_dir and its skip_corrupt and max_image_mb keys
// (max_image_mb: 1 to 768, default 256; a ConfigError with file:line:col otherwise).
DatasetContext read_data_context(cfg::MapReader& data_section, const std::string& base_dir);
using DatasetFactory = std::function<std::shared_ptr<Dataset>(cfg::MapReader& spec, const DatasetContext& ctx)>;
void register_dataset(const std::string& type, DatasetFactory f);
std::vector<std::string> dataset_types();
std::shared_ptr<Dataset> make_dataset(const cfg::Node& spec, const DatasetContext& ctx);
std::shared_ptr<Dataset> make_dataset(const cfg::Node& spec, const std::string& base_dir);  // other fields default

// Keys every dataset section accepts besides its reader's own (handled by make_dataset):
//   limit: N   use only N samples: a fixed pseudo-random choice (the same for the same set and N),
//              kept in dataset order, so class-sorted and interleaved sets both stay balanced.

// `validation_split: f` as Keras does it. Arrays and interleaved sets (Keras's fit on arrays): no
// shuffle, the LAST fraction f of the samples is the validation set (first = train: samples
// [0, floor(n * (1 - f))), second = the rest). A set grouped by class (image_folder; Keras's
// image_dataset_from_directory): the samples shuffled with `seed` first, int(f * n) of them
// validation, so both parts hold every class; each part kept in dataset order. DataError when
// either part would be empty.
std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> split_dataset(std::shared_ptr<Dataset> ds,
                                                                            double fraction, uint64_t seed = 0);

// A cheap fingerprint of a set's contents, 16 hex digits: its size, sample shape and classes and
// the bytes and labels of its first, middle and last samples (three reads whatever the size), so
// processes that read other files, or another version of them, almost surely differ in it.
std::string content_fingerprint(const Dataset& ds);

}  // namespace trainer
