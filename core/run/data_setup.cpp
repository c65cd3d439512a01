// The run's data: datasets, normalisation statistics and the train/val loaders.
#include "core/run/data_setup.h"

#include <fmt/format.h>

#include "core/graph/graph.h"

namespace trainer {

DataShards single_replica(const RunSpec& e) {
  DataShards s;
  s.batch = e.train.batch_size;
  s.eval_batch = e.train.eval_batch_size > 0 ? e.train.eval_batch_size : e.train.batch_size;
  return s;
}

DataSetup setup_data(const RunSpec& e, const DataShards& shards, const std::string& base_dir) {
  const DataSpec& spec = e.data;
  const int replicas = shards.replicas, first_rank = shards.first_rank, local = shards.local;
  DataSetup d;
  DatasetContext dc = spec.context(base_dir);
  dc.ignore_class = e.train.ignore_class;
  d.train = make_dataset(spec.train, dc);
  if (spec.val.defined()) d.val = make_dataset(spec.val, dc);
  if (spec.validation_split > 0) std::tie(d.train, d.val) = split_dataset(d.train, spec.validation_split, e.seed);
  // Labels index the model's outputs: a set with more classes than that would fail in the loss,
  // mid-run. (Fewer is allowed, as in Keras.)
  const Shape out = Graph(e.model).output_shape();  // shapes only, no memory
  // An output [T, classes] scores every position: the set must label every position ([T]), and a
  // set with one label per sample needs an output of class scores.
  const Shape per_position = out.rank() == 2 ? Shape{out[0]} : Shape{};
  for (auto [ds, node] : {std::pair{d.train.get(), spec.train}, std::pair{d.val.get(), spec.val}}) {
    if (!ds || !node.defined() || out.rank() == 0) continue;
    if (ds->label_shape() != per_position)
      node.fail(ds->label_shape().rank()
                    ? fmt::format("this set labels each of a sample's {} positions, but the model's output '{}' is "
                                  "{}, not [{}, classes] (one score vector per position)",
                                  ds->label_shape().str(), e.model.output, out.str(), ds->label_shape().str())
                    : fmt::format("the model's output '{}' scores every position ({}), but this set gives one label "
                                  "per sample (per-position labels come from a `text` set)",
                                  e.model.output, out.str()));
    // One output unit under binary_crossentropy scores two classes (0 and 1).
    const int64_t units = out.back();
    int64_t classes = out.rank() == 1 && units == 1 && e.train.loss == "binary_crossentropy" ? 2 : units;
    if (out.rank() <= 2 && ds->num_classes() > classes)
      node.fail(fmt::format("this set has {} classes, but the model's output '{}' gives {} values (one per class)",
                            ds->num_classes(), e.model.output, units));
  }
  const Augment& aug = spec.augment;
  if (d.train->float_samples() && spec.augment_node.defined())
    spec.augment_node.fail("'augment' applies to image sets; this set has float samples (sequences, arrays)");
  // A random crop larger than the padded training images is a config mistake: say where.
  if (const Augment::Crop& c = aug.crop; c.enabled()) {
    const Shape s = d.train->sample_shape();
    if (c.height > s[0] + 2 * c.padding || c.width > s[1] + 2 * c.padding)
      spec.augment_node.child("crop").child("size").fail(
          fmt::format("a {}x{} crop is larger than the training images ({}x{}, padded by {})", c.height, c.width, s[0],
                      s[1], c.padding));
  }
  const int workers = spec.workers ? *spec.workers : default_workers(local) * local;  // this process's

  auto stats = std::make_shared<const NormStats>(compute_stats(*d.train, aug.mean));
  d.stats = stats;

  LoaderOptions lo;
  lo.batch_size = shards.batch;
  lo.shuffle = e.train.shuffle;
  lo.drop_last = e.train.drop_last;
  lo.seed = e.seed;
  lo.augment = aug;
  lo.stats = stats;
  lo.workers = workers > 0 ? std::max(1, workers / local) : 0;
  lo.replicas = replicas;
  lo.ignore_class = e.train.ignore_class;
  LoaderOptions vo = lo;
  vo.batch_size = shards.eval_batch;
  vo.shuffle = false;
  vo.drop_last = false;
  vo.augment = aug.without_random();
  d.first_rank = first_rank;
  d.replicas = replicas;
  for (int r = first_rank; r < first_rank + local; ++r) {
    lo.rank = vo.rank = r;
    d.train_loaders.push_back(std::make_unique<Loader>(d.train, lo));
    if (d.val) d.val_loaders.push_back(std::make_unique<Loader>(d.val, vo));
  }
  // What the loaders deliver (after any crop or resize) must be what the model takes.
  for (size_t i = 0; i < d.train_loaders.size(); ++i) {
    for (auto [loader, node] : {std::pair{d.train_loaders[i].get(), spec.train},
                                std::pair{i < d.val_loaders.size() ? d.val_loaders[i].get() : nullptr, spec.val}}) {
      if (loader && loader->dataset().float_samples()) {
        std::vector<Shape> want, have = loader->dataset().input_shapes();
        for (const ModelInput& in : e.model.inputs) want.push_back(in.shape);
        auto list = [](const std::vector<Shape>& v) {
          std::string s;
          for (const Shape& x : v) s += (s.empty() ? "" : ", ") + x.str();
          return s;
        };
        if (have != want)
          node.fail(fmt::format("this set gives {} input(s) of shape {}, but the model takes {} input(s) of shape {}", have.size(),
                                list(have), want.size(), list(want)));
      }
      if (loader && loader->sample_shape() != e.model.input && e.model.inputs.size() > 1)
        node.fail(fmt::format("this set gives {} samples, but the model takes {} inputs ({} values per sample)",
                              loader->sample_shape().str(), e.model.inputs.size(), e.model.input.numel()));
      if (loader && loader->sample_shape() != e.model.input)
        node.fail(fmt::format("this set gives {} samples, but model.input is {}", loader->sample_shape().str(),
                              e.model.input.str()));
    }
  }
  return d;
}

}  // namespace trainer
