// Dataset registry (type name -> factory), make_dataset, SubsetDataset, split_dataset and the
// float-sample defaults.
#include "core/data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>

#include "core/data/image.h"
#include "core/data/random.h"

namespace trainer {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, DatasetFactory> factories;
};

// Function-local static: safe to use from other translation units' static initialisers.
Registry& registry() {
  static Registry r;
  return r;
}

struct Warnings {
  std::mutex mu;
  DataWarningHandler handler;
};

Warnings& warnings() {
  static Warnings w;
  return w;
}

}  // namespace

void set_data_warning_handler(DataWarningHandler handler) {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mu);
  w.handler = std::move(handler);
}

void data_warning(const std::string& line) {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mu);
  const std::string one = printable(line);  // a file name with a newline stays on its line
  if (w.handler) return w.handler(one);
  std::fprintf(stderr, "warning: %s\n", one.c_str());
  std::fflush(stderr);
}

std::vector<std::string> Dataset::class_names() const {
  std::vector<std::string> names;
  for (int i = 0; i < num_classes(); ++i) names.push_back(std::to_string(i));
  return names;
}

int32_t Dataset::get_f32(int64_t /*i*/, float* /*values*/) const {
  throw std::logic_error(describe() + ": get_f32 on a set of uint8 images (read them with get())");
}

void Dataset::get_labels(int64_t i, int32_t* labels) const {
  if (!float_samples()) {
    std::vector<uint8_t> px(size_t(sample_shape().numel()));
    labels[0] = get(i, px.data());
    return;
  }
  int64_t n = 0;
  for (const Shape& s : input_shapes()) n += s.numel();
  std::vector<float> values(static_cast<size_t>(n));
  get_f32_labels(i, values.data(), labels);
}

int32_t FloatDataset::get(int64_t /*i*/, uint8_t* /*pixels*/) const {
  throw DataError(describe() + ": has float samples (sequences, arrays), not uint8 images (read with get_f32)");
}

void register_dataset(const std::string& type, DatasetFactory f) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.factories.emplace(type, std::move(f)).second)
    throw std::logic_error("dataset type '" + type + "' registered twice");
}

std::vector<std::string> dataset_types() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> types;
  for (const auto& [name, f] : r.factories) types.push_back(name);
  return types;  // sorted (std::map)
}

DatasetContext read_data_context(cfg::MapReader& r, const std::string& base_dir) {
  DatasetContext dc;
  dc.base_dir = base_dir;
  // Unreadable image files: an error naming the file (exit 3), or skipped with one counted warning.
  dc.skip_corrupt = r.get<bool>("skip_corrupt", false);
  dc.max_image_bytes = uint64_t(r.get_int("max_image_mb", kDefaultMaxImageMb, 1, kMaxImageMbCeiling)) << 20;
  return dc;
}

std::shared_ptr<Dataset> make_dataset(const cfg::Node& spec, const std::string& base_dir) {
  DatasetContext ctx;
  ctx.base_dir = base_dir;
  return make_dataset(spec, ctx);
}

std::shared_ptr<Dataset> make_dataset(const cfg::Node& spec, const DatasetContext& ctx) {
  std::string what = spec.path().empty() ? "dataset" : "dataset " + spec.path();
  if (!spec.defined()) spec.fail(fmt::format("{} is missing (give a mapping with a 'type:')", what));
  cfg::MapReader reader(spec, what);
  std::string type = reader.get_choice("type", dataset_types());
  std::optional<int64_t> limit;
  if (reader.has("limit")) limit = reader.get_int("limit", std::nullopt, 1, INT64_MAX);
  DatasetFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    factory = r.factories.at(type);
  }
  std::shared_ptr<Dataset> ds = factory(reader, ctx);
  reader.finish();
  if (limit && *limit < ds->size()) {
    // A fixed pseudo-random choice, kept in dataset order: balanced in expectation whether the
    // set is sorted by class (image_folder) or interleaved (cifar10_bin, synthetic).
    std::vector<int64_t> idx(static_cast<size_t>(ds->size()));
    std::iota(idx.begin(), idx.end(), int64_t(0));
    Rng rng{0x6c696d6974ULL, uint64_t(ds->size()), uint64_t(*limit)};
    for (int64_t i = 0; i < *limit; ++i) std::swap(idx[size_t(i)], idx[size_t(rng.uniform_int(i, ds->size() - 1))]);
    idx.resize(static_cast<size_t>(*limit));
    std::sort(idx.begin(), idx.end());
    ds = std::make_shared<SubsetDataset>(ds, std::move(idx), fmt::format("limit: {}", *limit));
  }
  return ds;
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices, std::string what)
    : base_(std::move(base)), indices_(std::move(indices)), what_(std::move(what)) {
  if (!base_) throw std::invalid_argument("SubsetDataset: no base dataset");
  for (int64_t i : indices_)
    if (i < 0 || i >= base_->size())
      throw std::out_of_range(fmt::format("SubsetDataset: index {} outside a dataset of {}", i, base_->size()));
}

std::string SubsetDataset::describe() const {
  return fmt::format("{} ({}: {} of {} samples)", base_->describe(), what_, size(), base_->size());
}

std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> split_dataset(std::shared_ptr<Dataset> ds,
                                                                            double fraction, uint64_t seed) {
  if (!ds) throw std::invalid_argument("split_dataset: no dataset");
  if (!(fraction > 0.0 && fraction < 1.0))
    throw std::invalid_argument(fmt::format("validation_split must be in (0, 1), not {}", fraction));
  const int64_t n = ds->size();
  const bool shuffled = ds->grouped_by_class();
  // Keras: fit's split_at = floor(n * (1 - f)); image_dataset_from_directory's int(f * n) validation samples.
  const int64_t split_at = shuffled ? n - int64_t(double(n) * fraction) : int64_t(std::floor(double(n) * (1.0 - fraction)));
  if (split_at <= 0 || split_at >= n)
    throw DataError(fmt::format("validation_split {} of {} ({} samples) leaves an empty {} set", fraction,
                                ds->describe(), n, split_at <= 0 ? "training" : "validation"));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (shuffled) {
    Rng rng{0x73706c6974ULL, seed};  // "split"
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.uniform_int(0, i))]);
  }
  std::vector<int64_t> train(order.begin(), order.begin() + split_at), val(order.begin() + split_at, order.end());
  std::sort(train.begin(), train.end());
  std::sort(val.begin(), val.end());
  const std::string how = shuffled ? fmt::format("validation_split {} (shuffled, seed {})", fraction, seed)
                                   : fmt::format("validation_split {}", fraction);
  auto t = std::make_shared<SubsetDataset>(ds, std::move(train), how + ": training part");
  auto v = std::make_shared<SubsetDataset>(ds, std::move(val), how + ": validation part");
  return {t, v};
}

std::string content_fingerprint(const Dataset& ds) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  const int64_t n = ds.size(), classes = ds.num_classes(), elements = ds.sample_shape().numel();
  mix(&n, sizeof n);
  mix(&classes, sizeof classes);
  for (const Shape& s : ds.input_shapes())
    for (int64_t d : s.dims()) mix(&d, sizeof d);
  std::vector<uint8_t> pixels;
  std::vector<float> values;
  for (int64_t i : {int64_t(0), n / 2, n - 1}) {
    if (i < 0 || i >= n) continue;
    int32_t label = 0;
    if (ds.float_samples()) {
      int64_t total = 0;
      for (const Shape& s : ds.input_shapes()) total += s.numel();
      values.assign(size_t(total), 0.f);
      std::vector<int32_t> labels(size_t(ds.label_shape().numel()), 0);
      ds.get_f32_labels(i, values.data(), labels.data());
      mix(values.data(), values.size() * sizeof(float));
      if (labels.size() > 1) mix(labels.data(), labels.size() * sizeof(int32_t));  // (one: mixed below, as before)
      label = labels[0];
    } else {
      pixels.assign(size_t(elements), 0);
      label = ds.get(i, pixels.data());
      mix(pixels.data(), pixels.size());
    }
    mix(&label, sizeof label);
  }
  return fmt::format("{:016x}", h);
}

}  // namespace trainer
