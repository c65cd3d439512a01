// Reading and checking a whole experiment config.
#include "core/engine/experiment.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>

#include "core/engine/callbacks.h"
#include "core/engine/loss.h"
#include "core/graph/graph.h"
#include "core/optim/optimizer.h"
#include "core/optim/schedule.h"

namespace trainer {

Experiment load_experiment(const std::string& file, const std::vector<std::string>& overrides) {
  return read_experiment(cfg::load_document(file, overrides));
}

// A name quoted on one short printable line: control bytes (NUL included) as \xNN, at most 64
// characters of it, then its length.
static std::string quoted_name(const std::string& s) {
  const std::string out = cfg::printable(s.substr(0, 64));
  return s.size() <= 64 ? "'" + out + "'" : fmt::format("'{}...' ({} characters)", out, s.size());
}

static void read_train(cfg::MapReader r, TrainOptions& t) {
  t.epochs = int(r.get_int("epochs", 1, 1, 1000000));
  t.batch_size = r.get_int("batch_size", 32, 1, 1 << 20);
  t.eval_batch_size = r.get_int("eval_batch_size", 0, 0, 1 << 20);
  t.drop_last = r.get<bool>("drop_last", false);
  t.shuffle = r.get<bool>("shuffle", true);
  t.steps_per_epoch = r.get_int("steps_per_epoch", 0, 0, INT64_MAX);
  t.loss = r.get_choice("loss", loss_names(), "sparse_categorical_crossentropy");
  // auto (0): sized for the reduction path (plan_buckets, core/engine/grad_buckets.h).
  cfg::Node bucket = r.optional("bucket_mb");
  if (bucket.is_scalar() && bucket.scalar() == "auto") r.allow({"bucket_mb"});
  else t.bucket_mb = r.get_float("bucket_mb", 0.0, 0.001, 4096.0);
  t.sync_bn = r.get<bool>("sync_bn", false);
  r.allow({"loss_scale"});  // read with the precision (its default depends on it)
  r.finish();
}

static void read_devices(cfg::MapReader r, DeviceRequest& d) {
  cfg::Node gpus = r.optional("gpus");
  if (gpus.is_scalar() && gpus.scalar() == "all") {
    d.all_gpus = true;
    gpus = cfg::Node();
  }
  for (const cfg::Node& g : gpus.items()) {
    int i = g.as<int>();
    if (i < 0) g.fail("GPU ordinals are 0 or more");
    d.gpus.push_back(i);
  }
  d.cpu_replicas = int(r.get_int("cpu", 1, 1, 1024));
  d.threads = int(r.get_int("threads", 0, 0, 4096));
  d.tf32 = r.get<bool>("tf32", true);
  d.workspace_mb = r.get_int("workspace_mb", 0, 0, int64_t(1) << 20);
  r.finish();
}

static void read_checkpoint_options(cfg::MapReader r, CheckpointOptions& c) {
  c.every = int(r.get_int("every", 1, 0, 1000000));
  c.every_steps = r.get_int("every_steps", 0, 0, INT64_MAX);
  c.keep = int(r.get_int("keep", 2, 1, 1000000));
  cfg::Node best = r.optional("best");
  std::string mode = r.get_choice("mode", {"auto", "min", "max"}, "auto");
  r.finish();
  if (best.defined()) {
    c.best = best.as<std::string>();
    c.best_max = maximised(c.best, mode);
  }
}

static void read_init(cfg::MapReader r, InitOptions& i) {
  i.node = r.node();
  if (!i.node.defined()) return;
  i.from = r.get<std::string>("from");
  i.skip_mismatch = r.get<bool>("skip_mismatch", false);
  r.finish();
}

// `strategy:` with device parallelism's `placement:` and `pipeline: {microbatches}`.
static void read_strategy(cfg::MapReader& r, Experiment& e) {
  cfg::Node strategy = r.optional("strategy"), placement = r.optional("placement"), pipeline = r.optional("pipeline");
  if (e.strategy == "hybrid")
    strategy.fail("strategy 'hybrid' (data parallel over copies of a device-parallel pipeline) is not implemented: "
                  "it needs one gradient communicator per stage across the copies; use device_parallel or data_parallel");
  if (e.strategy != "device_parallel") {
    if (placement.defined()) placement.fail("'placement' needs strategy: device_parallel");
    if (pipeline.defined()) pipeline.fail("'pipeline' needs strategy: device_parallel");
    return;
  }
  if (!placement.defined()) strategy.fail("strategy device_parallel needs 'placement:' (layer or block name: device)");
  e.placement = read_placement(e.model, placement);
  cfg::MapReader p(pipeline, "the pipeline section");
  e.microbatches = int(p.get_int("microbatches", 1, 1, 1024));
  p.finish();
  if (e.devices.cpu_replicas > 1)
    cfg::root(e.doc).child("devices").child("cpu").fail(
        "several CPU replicas of a device-parallel model would be the hybrid strategy, which is not implemented; "
        "name virtual CPU devices (cpu:0, cpu:1) in placement instead");
}

ContextOptions context_options(const Experiment& e, int threads) {
  ContextOptions o;
  o.threads = threads;
  o.precision = e.precision;
  o.tf32 = e.devices.tf32;
  o.workspace_mb = e.devices.workspace_mb;
  return o;
}

std::vector<std::string> metric_names(const Experiment& e) {
  std::vector<std::string> m{"accuracy", "loss", "lr"};
  if (e.data.is_map() && (e.data.has("val") || e.data.has("validation_split"))) {
    m.push_back("val_accuracy");
    m.push_back("val_loss");
  }
  if (e.train.loss_scale.enabled()) {
    m.push_back("loss_scale");
    m.push_back("skipped_steps");
  }
  return m;
}

Experiment read_experiment(std::shared_ptr<cfg::Document> doc) {
  Experiment e;
  e.doc = doc;
  cfg::Node root = cfg::root(doc);
  if (!root.defined()) throw cfg::ConfigError(doc->file, "the config is empty");
  cfg::MapReader r(root, "the config");
  std::string stem = std::filesystem::path(doc->file).stem().string();
  e.name = r.get<std::string>("name", stem.empty() ? std::string("run") : stem);
  // The name becomes a folder under the runs root: one plain path component, nothing that could
  // climb out of it (../x, /abs), hide (.x) or confuse a shell or a filesystem.
  if (cfg::Node n = r.optional("name"); n.defined()) {
    bool plain = !e.name.empty() && e.name.size() <= 128 && e.name[0] != '.' && e.name[0] != '-';
    for (unsigned char c : e.name) plain = plain && (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '+' || c == '=');
    if (!plain)
      n.fail(fmt::format("{} is not a valid run name: it names the run's folder, so use letters, digits and - _ . + = "
                         "(at most 128, not starting with . or -)", quoted_name(e.name)));
  }
  e.seed = uint64_t(r.get_int("seed", 42, 0, INT64_MAX));
  e.model = parse_model(r.required("model"));
  e.data = r.required("data");
  e.optimizer = r.optional("optimizer");
  e.schedule = r.optional("schedule");
  read_train(cfg::MapReader(r.optional("train"), "the train section"), e.train);
  read_devices(cfg::MapReader(r.optional("devices"), "the devices section"), e.devices);
  e.strategy = r.get_choice("strategy", {"data_parallel", "device_parallel", "hybrid"}, "data_parallel");
  read_strategy(r, e);
  e.callbacks = r.optional("callbacks");
  read_checkpoint_options(cfg::MapReader(r.optional("checkpoint"), "the checkpoint section"), e.checkpoint);
  read_init(cfg::MapReader(r.optional("init"), "the init section"), e.init);
  // Whether the device can do it is checked when its context is made (CPU: AVX-512 for bf16, no
  // fp16; CUDA: compute capability 8.0 for bf16).
  const std::string precision = r.get_choice("precision", {"fp32", "bf16", "fp16"}, "fp32");
  e.precision = precision == "bf16" ? Precision::BF16 : precision == "fp16" ? Precision::FP16 : Precision::FP32;
  r.finish();
  e.train.loss_scale = read_loss_scale(root.child("train").child("loss_scale"), e.precision);
  if (e.optimizer.defined()) {
    cfg::MapReader o(e.optimizer, "the optimizer section");
    e.lr_scaling = o.get_choice("lr_scaling", {"none", "linear"}, "none");
  }

  // Everything else that needs no data or device is checked now, so a typo fails in a second.
  Graph check(e.model);
  make_optimizer(e.optimizer);
  make_schedule(e.schedule, e.train.epochs);
  std::vector<std::string> metrics = metric_names(e);
  Callbacks(e.callbacks, metrics);
  if (!e.checkpoint.best.empty() && std::find(metrics.begin(), metrics.end(), e.checkpoint.best) == metrics.end())
    cfg::root(doc).child("checkpoint").child("best").fail(
        fmt::format("this run has no metric '{}'{}", e.checkpoint.best, cfg::suggestion(e.checkpoint.best, metrics)));
  return e;
}

}  // namespace trainer
