// Checkpoint evaluation: the split's dataset and loader, the replica, the pass.
#include "core/engine/evaluate.h"

#include <fmt/format.h>

#include "core/data/loader.h"
#include "core/engine/devices.h"

namespace trainer {
namespace {

std::shared_ptr<Dataset> split_set(const Experiment& e, const std::string& split, const DatasetContext& dc) {
  cfg::Node data = e.data;
  if (split == "val" && !data.has("val") && data.has("validation_split")) {
    double f = data.child("validation_split").as<double>();
    return split_dataset(make_dataset(data.child("train"), dc), f, e.seed).second;
  }
  if (!data.has(split))
    data.fail(fmt::format("the config has no data.{} to evaluate on (give one with --data)", split));
  return make_dataset(data.child(split), dc);
}

}  // namespace

EvalResult evaluate_checkpoint(const Experiment& e, const CheckpointInfo& c, const EvalOptions& o) {
  cfg::MapReader r(e.data, "the data section");
  const DatasetContext dc = read_data_context(r, o.base_dir);
  std::shared_ptr<Dataset> ds = split_set(e, o.split, dc);
  Augment aug = parse_augment(r.optional("augment")).without_random();

  auto stats = std::make_shared<NormStats>(checkpoint_stats(c));
  if (aug.needs_stats() && stats->mean.empty())
    throw cfg::ConfigError(c.weights, "the checkpoint holds no normalisation statistics, but data.augment.mean needs them");
  LoaderOptions lo;
  lo.batch_size = e.train.eval_batch_size > 0 ? e.train.eval_batch_size : e.train.batch_size;
  lo.shuffle = false;
  lo.augment = aug;
  lo.stats = stats;
  lo.workers = default_workers(1);
  Loader loader(ds, lo);
  if (loader.sample_shape() != e.model.input)
    e.data.fail(fmt::format("data.{} gives {} samples, but model.input is {}", o.split, loader.sample_shape().str(),
                            e.model.input.str()));

  std::vector<Device> devices = select_devices(e.devices);
  DeviceRequest one = e.devices;
  Replica rep(e, devices[0], threads_per_replica(one, 1));
  rep.context().bind_thread();
  load_checkpoint(c, rep.state(), false);

  EvalResult out;
  out.dataset = ds->describe();
  out.class_names = ds->class_names();
  size_t k = size_t(rep.graph().nodes()[size_t(rep.logits_node())].shape[0]);
  if (k == 1) k = 2;  // a binary classifier: classes 0 and 1
  if (out.class_names.size() < k)
    for (size_t i = out.class_names.size(); i < k; ++i) out.class_names.push_back(std::to_string(i));
  out.class_names.resize(k);
  out.confusion.assign(k * k, 0);
  double loss = 0;
  int64_t correct = 0;
  std::vector<int32_t> predicted;
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) {
    if (b.size == 0) continue;
    LossStats s = rep.eval_step(b.images, b.labels, &predicted);
    loss += s.loss_sum;
    correct += s.correct;
    out.count += s.count;
    const int32_t* labels = static_cast<const int32_t*>(b.labels.data());
    for (int64_t i = 0; i < b.size; ++i)
      if (labels[i] >= 0 && size_t(labels[i]) < k) ++out.confusion[size_t(labels[i]) * k + size_t(predicted[size_t(i)])];
  }
  out.loss = out.count ? loss / double(out.count) : NAN;
  out.accuracy = out.count ? double(correct) / double(out.count) : NAN;
  return out;
}

}  // namespace trainer
