// The `data:` section: training/validation sets, augmentation and their loaders.
#pragma once
#include <memory>

#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/engine/experiment.h"

namespace trainer {

struct DataSetup {
  std::shared_ptr<Dataset> train, val;
  // Normalisation statistics of the training set (empty for none/constant means); saved with the
  // run (norm_stats.npy) so evaluation uses exactly what training used.
  std::shared_ptr<const NormStats> stats;
  // One loader per replica of this process: local replica i (global rank first_rank + i) reads
  // that rank's shard of every global batch.
  std::vector<std::unique_ptr<Loader>> train_loaders, val_loaders;
  int first_rank = 0, replicas = 1;  // over every process
};

// Reads `data: {train, val | validation_split, augment, workers, skip_corrupt}`; opens the sets (DataError
// on unreadable data) and checks that their images fit the model's input.
// `replicas` over the whole job; this process runs `local` of them (-1: all) from global rank
// `first_rank` (multi-process runs).
DataSetup setup_data(const Experiment& e, const std::string& base_dir, int replicas = 1, int first_rank = 0, int local = -1);

}  // namespace trainer
