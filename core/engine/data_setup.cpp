// The `data:` section: datasets, normalisation statistics and the train/val loaders.
#include "core/engine/data_setup.h"

#include <fmt/format.h>

#include "core/graph/graph.h"

namespace trainer {

DataSetup setup_data(const Experiment& e, const std::string& base_dir, int replicas, int first_rank, int local) {
  if (local < 0) local = replicas;
  cfg::MapReader r(e.data, "the data section");
  DataSetup d;
  const DatasetContext dc = read_data_context(r, base_dir);
  cfg::Node train_node = r.required("train");
  d.train = make_dataset(train_node, dc);
  cfg::Node val_node = r.optional("val");
  double split = r.get_float("validation_split", 0.0, 0.0, 0.99);
  if (val_node.defined() && split > 0)
    r.required("validation_split").fail("give either data.val or data.validation_split, not both");
  if (val_node.defined()) d.val = make_dataset(val_node, dc);
  if (split > 0) std::tie(d.train, d.val) = split_dataset(d.train, split, e.seed);
  r.allow({"test"});  // read by `trainer eval --split test`
  // Labels index the model's outputs: a set with more classes than that would fail in the loss,
  // mid-run. (Fewer is allowed, as in Keras.)
  const Shape out = Graph(e.model).output_shape();  // shapes only, no memory
  for (auto [ds, node] : {std::pair{d.train.get(), train_node}, std::pair{d.val.get(), val_node}}) {
    // One output unit under binary_crossentropy scores two classes (0 and 1).
    int64_t classes = out.rank() == 1 && out[0] == 1 && e.train.loss == "binary_crossentropy" ? 2 : out[0];
    if (ds && node.defined() && out.rank() == 1 && ds->num_classes() > classes)
      node.fail(fmt::format("this set has {} classes, but the model's output '{}' gives {} values (one per class)",
                            ds->num_classes(), e.model.output, out[0]));
  }
  Augment aug = parse_augment(r.optional("augment"));
  if (d.train->float_samples() && r.optional("augment").defined())
    r.optional("augment").fail("'augment' applies to image sets; this set has float samples (sequences, arrays)");
  // A random crop larger than the padded training images is a config mistake: say where.
  if (const Augment::Crop& c = aug.crop; c.enabled()) {
    const Shape s = d.train->sample_shape();
    if (c.height > s[0] + 2 * c.padding || c.width > s[1] + 2 * c.padding)
      r.optional("augment").child("crop").child("size").fail(
          fmt::format("a {}x{} crop is larger than the training images ({}x{}, padded by {})", c.height, c.width, s[0],
                      s[1], c.padding));
  }
  int workers = int(r.get_int("workers", default_workers(local) * local, 0, 64));  // this process's
  r.finish();

  auto stats = std::make_shared<const NormStats>(compute_stats(*d.train, aug.mean));
  d.stats = stats;

  LoaderOptions lo;
  lo.batch_size = e.train.batch_size;
  lo.shuffle = e.train.shuffle;
  lo.drop_last = e.train.drop_last;
  lo.seed = e.seed;
  lo.augment = aug;
  lo.stats = stats;
  lo.workers = workers > 0 ? std::max(1, workers / local) : 0;
  lo.replicas = replicas;
  LoaderOptions vo = lo;
  vo.batch_size = e.train.eval_batch_size > 0 ? e.train.eval_batch_size : e.train.batch_size;
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
    for (auto [loader, node] : {std::pair{d.train_loaders[i].get(), train_node},
                                std::pair{i < d.val_loaders.size() ? d.val_loaders[i].get() : nullptr, val_node}}) {
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
