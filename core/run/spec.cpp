// Reading a whole experiment config: each section through its module's reader, once.
#include "core/run/spec.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <sstream>

#include "core/graph/graph.h"
#include "core/graph/loss.h"

namespace trainer {
namespace {

// A name quoted on one short printable line: control bytes (NUL included) as \xNN, at most 64
// characters of it, then its length.
std::string quoted_name(const std::string& s) {
  const std::string out = printable(s.substr(0, 64));
  return s.size() <= 64 ? "'" + out + "'" : fmt::format("'{}...' ({} characters)", out, s.size());
}

WeightAverageOptions read_ema(cfg::Node n) {
  WeightAverageOptions e;
  if (!n.defined()) return e;
  cfg::MapReader r(n, "train.ema");
  e.decay = r.get_float("decay", 0.999, 0.0, 0.999999999);
  if (e.decay <= 0) r.required("decay").fail("train.ema.decay must be above 0 (leave train.ema out to keep no average)");
  e.every = int(r.get_int("every", 1, 1, 1000000));
  r.finish();
  return e;
}

LoggingSpec read_logging(cfg::Node n) {
  LoggingSpec l;
  cfg::MapReader r(n, "the logging section");
  l.tensorboard = r.get<bool>("tensorboard", true);
  r.finish();
  return l;
}

TrainSpec read_train(cfg::MapReader r) {
  TrainSpec t;
  t.epochs = int(r.get_int("epochs", 1, 1, 1000000));
  t.batch_size = r.get_int("batch_size", 32, 1, 1 << 20);
  t.eval_batch_size = r.get_int("eval_batch_size", 0, 0, 1 << 20);
  t.drop_last = r.get<bool>("drop_last", false);
  t.shuffle = r.get<bool>("shuffle", true);
  t.steps_per_epoch = r.get_int("steps_per_epoch", 0, 0, INT64_MAX);
  t.loss = r.get_choice("loss", loss_names(), "sparse_categorical_crossentropy");
  t.label_smoothing = r.get_float("label_smoothing", 0.0, 0.0, 1.0);
  if (cfg::Node ig = r.optional("ignore_class"); ig.defined()) {
    if (!loss_takes_ignore_class(t.loss))
      ig.fail(fmt::format("ignore_class applies to the categorical losses' class indices, not to {}", t.loss));
    t.ignore_class = int32_t(r.get_int("ignore_class", 0, INT32_MIN, INT32_MAX));
  }
  if (cfg::Node cw = r.optional("class_weight"); cw.defined()) {
    // {0: 1.0, 1: 5.0} (Keras's dict of class indices) or [1.0, 5.0] (one weight per class).
    t.class_weight_where = cw.where();
    auto weight = [](const cfg::Node& v) {
      const double w = v.as<double>();
      if (!(w >= 0 && w <= 1e6)) v.fail(fmt::format("a class weight must be between 0 and 1e6, not {}", w));
      return float(w);
    };
    if (cw.is_seq()) {
      for (size_t i = 0; i < cw.size(); ++i) t.class_weight[int32_t(i)] = weight(cw.at(i));
    } else if (cw.is_map()) {
      cfg::MapReader m(cw, "class_weight");
      for (const std::string& k : cw.keys()) {
        cfg::Node v = m.optional(k);
        int64_t cls = -1;
        if (k.empty() || k.size() > 8 || k.find_first_not_of("0123456789") != std::string::npos ||
            (cls = std::stoll(k)) >= (int64_t(1) << 24))
          v.fail(fmt::format("class_weight's keys are class indices (0, 1, ...), not '{}'", k));
        t.class_weight[int32_t(cls)] = weight(v);
      }
    } else {
      cw.fail("class_weight is a map of class indices to weights ({0: 1.0, 1: 5.0}) or a list of one weight per class");
    }
    if (t.class_weight.empty()) cw.fail("class_weight is empty: give the classes' weights, or remove it");
  }
  // auto (0): sized for the reduction path (plan_buckets, core/runtime/data_parallel/grad_buckets.h).
  cfg::Node bucket = r.optional("bucket_mb");
  if (bucket.is_scalar() && bucket.scalar() == "auto") r.allow({"bucket_mb"});
  else t.bucket_mb = r.get_float("bucket_mb", 0.0, 0.001, 4096.0);
  t.sync_bn = r.get<bool>("sync_bn", false);
  t.clip = read_grad_clip(r);
  t.accumulate = int(r.get_int("accumulate", 1, 1, 65536));
  t.watchdog_s = r.get_float("watchdog_s", 300.0, 0.0, 1e7);
  t.ema = read_ema(r.optional("ema"));
  r.allow({"loss_scale"});  // read with the precision (its default depends on it)
  r.finish();
  return t;
}

// `strategy:` with device parallelism's `placement:` and `pipeline: {microbatches}` (device_parallel
// and hybrid, whose copies are pipelines).
void read_strategy(cfg::MapReader& r, RunSpec& e) {
  cfg::Node strategy = r.optional("strategy"), placement = r.optional("placement"), pipeline = r.optional("pipeline");
  const std::string name = r.get_choice("strategy", {"data_parallel", "device_parallel", "hybrid"}, "data_parallel");
  e.strategy = name == "device_parallel" ? StrategyKind::DeviceParallel
               : name == "hybrid"        ? StrategyKind::Hybrid
                                         : StrategyKind::DataParallel;
  if (!placed(e.strategy)) {
    if (placement.defined()) placement.fail("'placement' needs strategy: device_parallel or hybrid");
    if (pipeline.defined()) pipeline.fail("'pipeline' needs strategy: device_parallel or hybrid");
    return;
  }
  if (!placement.defined()) strategy.fail(fmt::format("strategy {} needs 'placement:' (layer or block name: device)", name));
  e.placement = read_placement(e.model, placement);
  cfg::MapReader p(pipeline, "the pipeline section");
  e.microbatches = int(p.get_int("microbatches", 1, 1, 1024));
  p.finish();
  if (e.strategy == StrategyKind::DeviceParallel && e.devices.cpu_replicas > 1)
    e.at("devices.cpu").fail("several CPU replicas of a device-parallel model are the hybrid strategy (strategy: hybrid); "
                             "or name virtual CPU devices (cpu:0, cpu:1) in placement");
}

std::vector<std::string> metric_names(const RunSpec& e) {
  std::vector<std::string> m{"accuracy", "loss", "lr"};
  if (e.data.has_val()) {
    m.push_back("val_accuracy");
    m.push_back("val_loss");
    if (e.train.ema.enabled()) {
      m.push_back("val_accuracy_ema");
      m.push_back("val_loss_ema");
    }
  }
  if (e.train.loss_scale.enabled()) {
    m.push_back("loss_scale");
    m.push_back("skipped_steps");
  }
  if (e.train.clip.enabled()) m.push_back("grad_norm");
  return m;
}

}  // namespace

cfg::Node RunSpec::at(const std::string& dotted) const {
  cfg::Node n = cfg::root(doc);
  std::stringstream ss(dotted);
  for (std::string key; std::getline(ss, key, '.');) n = n.child(key);
  return n;
}

RunSpec load_run_spec(const std::string& file, const std::vector<std::string>& overrides) {
  return read_run_spec(cfg::load_document(file, overrides));
}

RunSpec read_run_spec(std::shared_ptr<cfg::Document> doc) {
  RunSpec e;
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
  e.data = read_data(r.required("data"));
  e.optimizer = read_optimizer(r.optional("optimizer"));
  e.schedule = read_schedule(r.optional("schedule"));
  e.train = read_train(cfg::MapReader(r.optional("train"), "the train section"));
  e.devices = read_devices(r.optional("devices"));
  read_strategy(r, e);
  cfg::Node callbacks = r.optional("callbacks");
  e.checkpoint = read_checkpoint_spec(r.optional("checkpoint"));
  e.init = read_init_spec(r.optional("init"));
  e.logging = read_logging(r.optional("logging"));
  // Whether the device can do it is checked when its context is made (CPU: AVX-512 for bf16, no
  // fp16; CUDA: compute capability 8.0 for bf16).
  const std::string precision = r.get_choice("precision", {"fp32", "bf16", "fp16"}, "fp32");
  e.precision = precision == "bf16" ? Precision::BF16 : precision == "fp16" ? Precision::FP16 : Precision::FP32;
  r.finish();
  e.train.loss_scale = read_loss_scale(root.child("train").child("loss_scale"), e.precision);
  e.train.clip.keras = e.optimizer.convention == OptimConvention::Keras;
  e.metrics = metric_names(e);
  e.callbacks = read_callbacks(callbacks, e.metrics);
  if (!e.checkpoint.best.empty() && std::find(e.metrics.begin(), e.metrics.end(), e.checkpoint.best) == e.metrics.end())
    e.checkpoint.best_node.fail(
        fmt::format("this run has no metric '{}'{}", e.checkpoint.best, cfg::suggestion(e.checkpoint.best, e.metrics)));
  // The model's graph (layers, shapes, parameters) is checked now, so a typo fails in a second.
  Graph check(e.model);
  return e;
}

}  // namespace trainer
