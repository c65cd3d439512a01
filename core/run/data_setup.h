// The run's data: training/validation sets opened from the spec, their statistics, and one pair
// of loaders per replica of this process, checked against the model's inputs and outputs.
#pragma once
#include <memory>

#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/run/spec.h"

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

// Where the loaders shard from: `replicas` over the whole job; this process runs `local` of them
// from global rank `first_rank` with batches of `batch` (eval: `eval_batch`) per replica.
struct DataShards {
  int replicas = 1, first_rank = 0, local = 1;
  int64_t batch = 32, eval_batch = 32;
};

// Opens the sets (DataError on unreadable data) and checks that their classes fit the model's
// output and their samples its inputs (ConfigErrors at the set's place in the config).
DataSetup setup_data(const RunSpec& e, const DataShards& shards, const std::string& base_dir);
// The shards of a run over `e`'s batch on one replica (bench-data, tests).
DataShards single_replica(const RunSpec& e);

}  // namespace trainer
