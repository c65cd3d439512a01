// MemoryDataset: construction checks and sample access.
#include "core/data/memory_dataset.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

namespace trainer {

MemoryDataset::MemoryDataset(Shape sample_shape, int num_classes, std::vector<uint8_t> pixels,
                             std::vector<int32_t> labels, std::string description,
                             std::vector<std::string> class_names)
    : shape_(std::move(sample_shape)),
      num_classes_(num_classes),
      sample_bytes_(size_t(shape_.numel())),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)),
      description_(std::move(description)),
      class_names_(std::move(class_names)) {
  if (shape_.rank() != 3) throw std::invalid_argument("MemoryDataset: sample shape must be H, W, C");
  if (pixels_.size() != labels_.size() * sample_bytes_)
    throw std::invalid_argument(fmt::format("MemoryDataset: {} bytes of pixels for {} samples of {}",
                                            pixels_.size(), labels_.size(), shape_.str()));
  if (!class_names_.empty() && int(class_names_.size()) != num_classes_)
    throw std::invalid_argument("MemoryDataset: class_names must have num_classes entries");
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i] < 0 || labels_[i] >= num_classes_)
      throw DataError(fmt::format("{}: sample {} has label {}, outside 0..{}", description_, i, labels_[i],
                                  num_classes_ - 1));
}

std::vector<std::string> MemoryDataset::class_names() const {
  return class_names_.empty() ? Dataset::class_names() : class_names_;
}

int32_t MemoryDataset::get(int64_t i, uint8_t* pixels) const {
  std::memcpy(pixels, this->pixels(i), sample_bytes_);
  return labels_[size_t(i)];
}

}  // namespace trainer
