// Checkpoint evaluation: the split's dataset and loader, one replica on the config's first device,
// the trainees' evaluation loop with a confusion matrix.
#include "core/run/evaluate.h"

#include <fmt/format.h>

#include "core/data/loader.h"
#include "core/run/plan.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

std::shared_ptr<Dataset> split_set(const RunSpec& e, const std::string& split, const DatasetContext& dc) {
  const DataSpec& d = e.data;
  if (split == "val" && !d.val.defined() && d.validation_split > 0)
    return split_dataset(make_dataset(d.train, dc), d.validation_split, e.seed).second;
  const cfg::Node& node = split == "val" ? d.val : split == "test" ? d.test : d.train;
  if (!node.defined()) d.section.fail(fmt::format("the config has no data.{} to evaluate on (give one with --data)", split));
  return make_dataset(node, dc);
}

}  // namespace

RunSpec one_copy(const RunSpec& e) {
  RunSpec one = e;
  one.strategy = StrategyKind::DataParallel;
  const Device first = select_devices(e.devices)[0];
  one.devices.all_gpus = false;
  one.devices.gpus.clear();
  if (!first.is_cpu()) one.devices.gpus = {first.index};
  one.devices.cpu_replicas = 1;
  return one;
}

EvalResult evaluate_checkpoint(const RunSpec& e, const CheckpointInfo& c, const EvalOptions& o) {
  DatasetContext dc = e.data.context(o.base_dir);
  dc.ignore_class = e.train.ignore_class;
  std::shared_ptr<Dataset> ds = split_set(e, o.split, dc);
  const Augment aug = e.data.augment.without_random();

  auto stats = std::make_shared<NormStats>(checkpoint_stats(c));
  if (aug.needs_stats() && stats->mean.empty())
    throw cfg::ConfigError(c.weights, "the checkpoint holds no normalisation statistics, but data.augment.mean needs them");
  LoaderOptions lo;
  lo.batch_size = e.train.eval_batch_size > 0 ? e.train.eval_batch_size : e.train.batch_size;
  lo.shuffle = false;
  lo.augment = aug;
  lo.stats = stats;
  lo.workers = default_workers(1);
  lo.ignore_class = e.train.ignore_class;
  Loader loader(ds, lo);
  if (loader.sample_shape() != e.model.input)
    e.data.section.fail(fmt::format("data.{} gives {} samples, but model.input is {}", o.split, loader.sample_shape().str(),
                                    e.model.input.str()));

  const RunPlan plan = plan_run(one_copy(e));
  std::unique_ptr<Strategy> strategy = strategy_type(plan.strategy).make(plan.trainee, plan.devices, plan.threads);

  EvalResult out;
  out.dataset = ds->describe();
  out.class_names = ds->class_names();
  size_t k = size_t(plan.logits_units);
  if (k == 1) k = 2;  // a binary classifier: classes 0 and 1
  if (out.class_names.size() < k)
    for (size_t i = out.class_names.size(); i < k; ++i) out.class_names.push_back(std::to_string(i));
  out.class_names.resize(k);
  const bool confusion = k <= kMaxConfusionClasses;  // GPT-2's 50257 squared would be 20 GB
  if (confusion) out.confusion.assign(k * k, 0);
  out.per_position = plan.logits_positions > 0;
  LossStats s;
  strategy->run([&](Trainee& w) {
    load_checkpoint(c, w.state(), false, o.weights);
    s = w.evaluate(loader, [&](const Batch& b, const std::vector<int32_t>& predicted) {
      if (!confusion) return;
      const int32_t* labels = static_cast<const int32_t*>(b.labels.data());
      for (int64_t i = 0; i < b.labels.numel(); ++i)  // samples, or positions (labels [N, T]), not the ignored ones
        if (labels[i] >= 0 && size_t(labels[i]) < k && labels[i] != e.train.ignore_class)
          ++out.confusion[size_t(labels[i]) * k + size_t(predicted[size_t(i)])];
    });
  });
  out.count = s.count;
  out.loss = s.count ? s.loss_sum / double(s.count) : NAN;
  out.accuracy = s.count ? double(s.correct) / double(s.count) : NAN;
  return out;
}

}  // namespace trainer
