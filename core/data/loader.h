// Loader: batches of float images (or float samples) from a Dataset, shuffled, augmented and
// sharded per replica, prepared ahead by worker threads into a bounded queue; every result a pure
// function of the seed.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/transforms.h"
#include "core/tensor/tensor.h"

namespace trainer {

struct Batch {
  Tensor images;                 // f32 [size, H, W, C], host memory (from LoaderOptions::allocator);
                                 // a float set's (Dataset::float_samples) [size, ...sample_shape()]
  Tensor labels;                 // i32 [size]
  int64_t size = 0;              // this replica's samples; 0 is possible in a final partial batch
  int64_t global_size = 0;       // samples in this step over all replicas (weight losses by size/global_size)
  int64_t global_scored = 0;     // labels scored over all replicas (scored_labels); 0: global_size x positions
  int64_t index = 0;             // the batch's number within the epoch
  std::vector<int64_t> indices;  // the dataset indices of the samples, in order
};

// The labels a step of batch `b` scores over every replica: the loss gradient's divisor (the loss
// is the mean over them). Samples x label positions, less the labels equal to the ignore class
// (LoaderOptions::ignore_class) when the loader counted them (Batch::global_scored).
int64_t scored_labels(const Batch& b);

struct LoaderOptions {
  int64_t batch_size = 32;  // per replica
  bool shuffle = true;      // a new permutation every epoch: a pure function of (seed, epoch)
  bool drop_last = false;   // drop the final partial (global) batch
  uint64_t seed = 0;        // shuffling and augmentation
  // Random transforms apply when `augment` enables them: give validation/test loaders
  // augment.without_random(). `stats` (from compute_stats over the TRAINING set) is required when
  // augment.needs_stats().
  Augment augment;
  std::shared_ptr<const NormStats> stats;
  int workers = 2;          // threads preparing batches; 0 prepares them in next() on the caller's thread
                            // (default_workers() is the suggested default)
  int prefetch = 3;         // batches prepared ahead (raised to `workers` when smaller)
  // Data parallelism: each epoch's permutation is cut into global batches of batch_size * replicas
  // samples, and replica `rank` takes the rank-th contiguous part of each (so the replicas' shards
  // are disjoint, cover the epoch, and concatenated in rank order equal one replica's batch of
  // batch_size * replicas). A final partial global batch of M samples is split as evenly as
  // possible (replica r takes [r*M/R, (r+1)*M/R)), so every replica has the same batches_per_epoch.
  int rank = 0;
  int replicas = 1;
  // train.ignore_class: labels equal to it (pads) are allowed whatever their value, and each batch
  // counts its global batch's other labels (Batch::global_scored), reading the labels of the other
  // replicas' samples too (Dataset::get_labels).
  std::optional<int32_t> ignore_class;
  Allocator* allocator = nullptr;  // host_allocator() when null (e.g. a pinned-memory allocator)
};

// Worker threads per replica's loader when the config does not say: half the hardware threads
// shared over the replicas (the other half compute), at least 1 and at most 4 each. One worker
// augments a cached 32x32 sample in a few microseconds and decodes a small JPEG, resizes it to
// 224x224 and normalises it in under half a millisecond (scripts/bench-loader.sh), so a few keep
// a CPU replica or a GPU fed; sets decoded per access from large JPEGs need more.
int default_workers(int replicas = 1);

// One consumer thread calls start_epoch/next; the workers are internal.
class Loader {
 public:
  // Throws std::invalid_argument for bad options, DataError when stats do not fit the dataset.
  // A set with float samples is copied as get_f32 writes it: its augment must be the identity (no
  // shift, flip, crop, mean, scale 1; std::invalid_argument otherwise) and `stats` is unused.
  Loader(std::shared_ptr<const Dataset> ds, LoaderOptions opt);
  ~Loader();  // stops the workers; safe at any point of an epoch
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins epoch `epoch` (any earlier epoch's unread batches are discarded) and starts prefetching.
  // `first_batch` > 0 resumes inside the epoch (after a checkpoint): the batches from there on are
  // exactly those an uninterrupted epoch would have produced.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch; false once the epoch is done. An exception thrown while
  // preparing a batch (e.g. a DataError) is rethrown here, when that batch is due, and again on
  // every later call until start_epoch.
  bool next(Batch& b);

  int64_t batches_per_epoch() const;
  int64_t samples_per_epoch() const;  // this replica's
  int64_t global_batch_size(int64_t k) const;  // batch k's samples over every replica (Batch::global_size)
  // Batch k's (of the epoch started, or of pass `epoch` over the data) labels scored over every
  // replica (Batch::global_scored): the divisor of an accumulated step's micro-batches, counted
  // before the later ones are read.
  int64_t global_scored(int64_t k) const;
  int64_t global_scored(int64_t k, int64_t epoch) const;
  const Dataset& dataset() const { return *ds_; }
  // A batch's image shape without the batch dimension: the augment's crop size when it crops,
  // else the dataset's sample shape (what model.input must be; for a float set with several
  // inputs, dataset().input_shapes() tells how to split it).
  const Shape& sample_shape() const { return shape_; }
  const LoaderOptions& options() const { return opt_; }

  // The permutation of epoch `epoch` (identity without shuffle); exposed for tests and resumption.
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

 private:
  struct State;
  void produce(int64_t batch, int64_t epoch, const std::vector<int64_t>& perm, Batch& out) const;
  // Labels not equal to the ignore class among batch k's global samples; `own` (may be null) holds
  // this replica's part's labels, read already.
  int64_t count_scored(int64_t k, const std::vector<int64_t>& perm, const Batch* own) const;
  void worker_loop();

  std::shared_ptr<const Dataset> ds_;
  LoaderOptions opt_;
  SampleTransform transform_;
  Shape shape_;  // output sample shape
  std::unique_ptr<State> st_;
};

}  // namespace trainer
