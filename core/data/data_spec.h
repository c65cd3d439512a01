// DataSpec: the `data:` section read once — which sets, the validation split, augmentation, workers and the readers' shared limits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/data/dataset.h"
#include "core/data/transforms.h"
#include "core/io/config.h"

namespace trainer {

struct DataSpec {
  cfg::Node section;               // `data:`, for messages
  // The sets' sections: each reader reads its own keys when the set is opened (make_dataset), as
  // each layer type reads its own (the registry pattern).
  cfg::Node train, val, test;
  double validation_split = 0;     // Keras' validation_split: the last fraction of train
  Augment augment;
  cfg::Node augment_node;          // `augment:`, for messages (undefined when absent)
  std::optional<int> workers;      // data.workers over this process (absent: default_workers per replica)
  bool skip_corrupt = false;       // unreadable image files are skipped, counted, instead of an error
  uint64_t max_image_bytes = uint64_t(kDefaultMaxImageMb) << 20;

  bool has_val() const { return val.defined() || validation_split > 0; }
  // The context the readers open sets with (relative paths resolve against base_dir).
  DatasetContext context(const std::string& base_dir) const;
};

// Reads `data: {train, val | validation_split, test, augment, workers, skip_corrupt, max_image_mb}`.
DataSpec read_data(const cfg::Node& section);

}  // namespace trainer
