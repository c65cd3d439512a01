// MemoryDataset: decoded images held in one uint8 buffer (what the file readers produce).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace trainer {

class MemoryDataset final : public Dataset {
 public:
  // `pixels` holds labels.size() images of `sample_shape` (HWC) back to back; every label must be
  // in [0, num_classes). `class_names` may be empty (then "0", "1", ...).
  MemoryDataset(Shape sample_shape, int num_classes, std::vector<uint8_t> pixels, std::vector<int32_t> labels,
                std::string description, std::vector<std::string> class_names = {});

  int64_t size() const override { return int64_t(labels_.size()); }
  Shape sample_shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }
  std::vector<std::string> class_names() const override;
  int32_t get(int64_t i, uint8_t* pixels) const override;
  std::string describe() const override { return description_; }

  // Keeps `owner` alive as long as this dataset (e.g. the memory reservation of a decoded cache).
  void hold(std::shared_ptr<const void> owner) { owner_ = std::move(owner); }
  // An image folder's decoded cache: grouped by class (Dataset::grouped_by_class).
  void set_grouped_by_class(bool grouped) { grouped_ = grouped; }
  bool grouped_by_class() const override { return grouped_; }

  const uint8_t* pixels(int64_t i) const { return pixels_.data() + size_t(i) * sample_bytes_; }
  const std::vector<int32_t>& labels() const { return labels_; }

 private:
  Shape shape_;
  int num_classes_;
  size_t sample_bytes_;
  std::vector<uint8_t> pixels_;
  std::vector<int32_t> labels_;
  std::string description_;
  std::vector<std::string> class_names_;
  std::shared_ptr<const void> owner_;
  bool grouped_ = false;
};

}  // namespace trainer
