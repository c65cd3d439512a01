// Planning a run: devices through the strategy's registry entry, batches, learning rate, the
// model's sizes and loss head, and the start-up banner printed from them.
#include "core/run/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>

#include "core/data/dataset.h"
#include "core/dist/launch.h"
#include "core/graph/graph.h"
#include "core/graph/loss.h"
#include "core/graph/summary.h"
#include "core/ops/fast_paths.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

// Optimizer state buffers per trainable value (momentum; Adam's m and v; RMSprop's three).
int optimizer_slots(const OptimizerSpec& o) {
  if (o.type == "adam" || o.type == "adamw") return 2;
  if (o.type == "rmsprop") return 3;
  return 1;
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / double(1 << 20)); }

}  // namespace

bool cuda_graphs_wanted(bool configured) {
  const char* env = std::getenv("TRAINER_CUDA_GRAPHS");
  if (!env || !*env) return configured;
  const std::string v = env;
  if (v == "0" || v == "1") return v == "1";
  throw cfg::ConfigError("TRAINER_CUDA_GRAPHS", fmt::format("'{}' is neither 0 (launch every step kernel by kernel) nor 1", v));
}

TraineeSpec trainee_spec(const RunSpec& e) {
  TraineeSpec t;
  t.model = e.model;
  t.optimizer = e.optimizer;
  t.loss = e.train.loss;
  t.loss_options.label_smoothing = float(e.train.label_smoothing);
  t.loss_options.ignore_class = e.train.ignore_class;
  t.context.precision = e.precision;
  t.context.tf32 = e.devices.tf32;
  t.context.workspace_mb = e.devices.workspace_mb;
  t.seed = e.seed;
  t.loss_scale = e.train.loss_scale;
  t.clip = e.train.clip;
  t.accumulate = e.train.accumulate;
  t.average = e.train.ema;
  t.sync_bn = e.train.sync_bn;
  t.bucket_floats = e.train.bucket_mb > 0 ? std::max<int64_t>(1, int64_t(e.train.bucket_mb * (1 << 20) / sizeof(float))) : 0;
  t.placement = e.placement;
  t.microbatches = e.microbatches;
  t.cuda_graphs = cuda_graphs_wanted(e.devices.cuda_graphs);
  t.graph = t.make_graph();
  if (!e.train.class_weight.empty()) {
    // One weight per class of the model's output (binary_crossentropy's one unit: classes 0 and 1).
    const Shape& out = t.graph->nodes()[size_t(t.graph->output_node())].shape;
    const int64_t classes = e.train.loss == "binary_crossentropy" ? 2 : out.rank() ? out.back() : 1;
    t.loss_options.class_weight.assign(size_t(classes), 1.0f);
    for (const auto& [cls, w] : e.train.class_weight) {
      if (cls >= classes)
        throw cfg::ConfigError(e.train.class_weight_where,
                               fmt::format("class_weight names class {}, but the model scores {} classes (0 to {})",
                                           cls, classes, classes - 1));
      t.loss_options.class_weight[size_t(cls)] = w;
    }
  }
  return t;
}

namespace {

// The model's sizes and loss head from the plan's graph.
void plan_sizes(const RunSpec& e, RunPlan& p) {
  const Graph& g = *p.trainee.graph;  // shapes and parameters only, no memory
  p.flops_per_sample = g.flops_per_sample();
  p.params = g.params().count(true) + g.params().count(false);
  p.trainable_params = g.params().count(true);
  p.param_bytes = int64_t(sizeof(float)) * (g.params().total_floats() +
                                            (1 + optimizer_slots(e.optimizer)) * g.params().trainable_floats());
  for (const GraphNode& n : g.nodes()) p.activation_bytes_per_sample += int64_t(sizeof(float)) * n.shape.numel();
  const int64_t per_value = int64_t(sizeof(float)) * (2 + optimizer_slots(e.optimizer));  // weight, gradient, state
  if (placed(e.strategy))
    for (const DeviceMemory& m : memory_per_device(g, e.placement))
      p.memory.push_back({m.device, per_value * m.params, int64_t(sizeof(float)) * m.activations_per_sample});
  else  // outputs and their gradients; with accumulation, the held gradient sum
    p.memory.push_back({"replica", p.param_bytes + (e.train.accumulate > 1 ? int64_t(sizeof(float)) * g.params().trainable_floats() : 0),
                        2 * p.activation_bytes_per_sample});
  auto cpu = make_context(Device::cpu(0));
  auto loss = make_loss(e.train.loss, *cpu);
  const LossHead head = loss_head(g, *loss);
  p.logits = g.nodes()[size_t(head.logits)].layer->name();
  const Shape& logits = g.nodes()[size_t(head.logits)].shape;
  p.logits_units = logits.rank() == 2 ? logits[1] : logits.numel();
  p.logits_positions = logits.rank() == 2 ? logits[0] : 0;
  p.fused_loss = head.fused;
  p.fused_output = loss->fused_output();
}

}  // namespace

RunPlan plan_model(const RunSpec& e) {
  RunPlan p;
  p.strategy = e.strategy;
  p.trainee = trainee_spec(e);
  p.threads = threads_per_replica(e.devices, 1);
  p.batch = p.global_batch = e.train.batch_size;
  p.eval_batch = e.train.eval_batch_size > 0 ? e.train.eval_batch_size : p.batch;
  p.base_lr = e.optimizer.lr;
  plan_sizes(e, p);
  return p;
}

RunPlan plan_run(const RunSpec& e, const std::optional<CheckpointInfo>& resume) {
  RunPlan p;
  p.strategy = e.strategy;
  const Launch& proc = this_process();
  p.processes = proc.size;
  p.process = proc.rank;
  // A pipeline's stages hand each other activations inside one process; copies of it (hybrid) may
  // be in several, each process holding whole copies.
  if (proc.multi() && e.strategy == StrategyKind::DeviceParallel)
    e.at("strategy").fail("device_parallel runs its pipeline in one process: under mpirun or srun, strategy: hybrid "
                          "runs whole copies of the pipeline in each process");

  p.trainee = trainee_spec(e);
  TraineeSpec& t = p.trainee;
  if (e.doc) p.config_hash = config_hash(*e.doc);

  const StrategyType& kind = strategy_type(e.strategy);
  p.devices = kind.devices(t, e.devices, &p.device_notes);
  p.local_replicas = kind.local_replicas(t, p.devices);
  p.replicas = p.local_replicas * proc.size;
  p.first_rank = proc.rank * p.local_replicas;
  p.threads = kind.threads(e.devices, p.devices);
  p.batch = e.train.batch_size;
  p.lr_factor = e.optimizer.lr_scaling == "linear" ? p.replicas : 1;
  if (resume) {
    // Keep the checkpoint's global batch, so the batches and schedule continue as they were.
    const TrainState& s = resume->state;
    if (s.global_batch % p.replicas != 0)
      throw cfg::ConfigError(resume->sidecar, fmt::format("the checkpoint's global batch of {} cannot be split over {} replicas",
                                                          s.global_batch, p.replicas));
    if (s.replicas != p.replicas)
      p.batch_note = fmt::format(" (the checkpoint's global batch of {} on {} replicas, now {} per replica)", s.global_batch,
                                 s.replicas, s.global_batch / p.replicas);
    p.batch = s.global_batch / p.replicas;
    p.lr_factor = s.lr_factor;
  }
  p.global_batch = p.batch * p.replicas;
  p.eval_batch = e.train.eval_batch_size > 0 ? e.train.eval_batch_size : p.batch;
  p.base_lr = e.optimizer.lr * p.lr_factor;

  plan_sizes(e, p);
  t.context.threads = p.threads;
  return p;
}

void RunPlan::with_steps(int64_t batches_per_epoch, int64_t train_samples) {
  steps_per_epoch = batches_per_epoch;
  if (steps_per_epoch == 0)
    throw DataError(fmt::format("the training set has {} samples, fewer than one global batch of {} (drop_last is on)",
                                train_samples, global_batch));
}

std::vector<std::string> RunPlan::banner(const RunSpec& e) const {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("Model {}: {} params ({} trainable), {:.1f} MFLOPs/sample forward", e.name,
                              with_thousands(params), with_thousands(trainable_params), double(flops_per_sample) / 1e6));
  const std::string steps = steps_per_epoch > 0 ? fmt::format(", {} steps/epoch", steps_per_epoch) : "";
  // train.accumulate, for every strategy (a pipeline's GPipe micro-batches are pieces of each of these).
  const int k = e.train.accumulate;
  const std::string accumulate =
      k > 1 ? fmt::format("; gradients accumulated over {} micro-batches: {} samples per optimizer step{}", k,
                          int64_t(k) * global_batch,
                          steps_per_epoch > 0 ? fmt::format(", {} optimizer steps/epoch", (steps_per_epoch + k - 1) / k) : "")
            : "";
  if (strategy == StrategyKind::DeviceParallel) {
    std::string s = fmt::format("Devices: device parallel over {} devices:", e.placement.devices.size());
    for (size_t d = 0; d < e.placement.devices.size(); ++d) {
      int layers = 0;
      for (int ld : e.placement.layer_device) layers += ld == int(d);
      s += fmt::format("{} {} ({}{}, {} layer{})", d ? "," : "", e.placement.devices[d], devices[d].str(),
                       devices[d].is_cpu() ? fmt::format(", {} threads", threads) : "", layers, layers == 1 ? "" : "s");
    }
    lines.push_back(s + fmt::format("; batch {}, {} micro-batch{} (GPipe){}{}{}", batch, e.microbatches,
                                    e.microbatches == 1 ? "" : "es", steps, batch_note, accumulate));
    for (const std::string& l : device_notes) lines.push_back("Note: " + l);
  } else if (strategy == StrategyKind::Hybrid) {
    // R copies of the S-stage pipeline, copy r's stage s on device r*S + s.
    const size_t S = e.placement.devices.size();
    std::string s = fmt::format("Devices: hybrid, {} copies x {} stages (data parallel over pipelines{}):", replicas, S,
                                processes > 1 ? fmt::format(", {} {} in each of {} processes", local_replicas,
                                                              local_replicas == 1 ? "copy" : "copies", processes)
                                              : "");
    for (int r = 0; r < local_replicas; ++r) {  // this process's copies (process 0's, where it prints)
      s += fmt::format("{} copy {}:", r ? ";" : "", first_rank + r);
      for (size_t d = 0; d < S; ++d) {
        int layers = 0;
        for (int ld : e.placement.layer_device) layers += ld == int(d);
        const Device& dev = devices[size_t(r) * S + d];
        s += fmt::format("{} {} -> {} ({} layer{})", d ? "," : "", e.placement.devices[d], dev.str(), layers, layers == 1 ? "" : "s");
      }
    }
    lines.push_back(s + fmt::format("; {}batch {} per copy, global batch {}, {} micro-batch{} (GPipe){}{}{}",
                                    devices[0].is_cpu() ? fmt::format("{} compute threads per stage, ", threads) : "",
                                    batch, global_batch, e.microbatches, e.microbatches == 1 ? "" : "es", steps, batch_note,
                                    accumulate));
  } else {
    std::string where = replicas == 1 ? devices[0].str()
                                      : fmt::format("{} replicas ({}..{})", replicas, devices[0].str(), devices.back().str());
    if (processes > 1)
      where = fmt::format("{} replicas in {} processes ({} each: {}; launched by {})", replicas, processes, local_replicas,
                          local_replicas == 1 ? devices[0].str() : fmt::format("{}..{}", devices[0].str(), devices.back().str()),
                          this_process().launcher);
    lines.push_back(fmt::format("Devices: {}{}; batch {} per replica, global batch {}{}{}{}", where,
                                devices[0].is_cpu() ? fmt::format(", {} compute threads each", threads) : "", batch,
                                global_batch, steps, batch_note, accumulate));
  }
  if (const FastPaths fast = FastPaths::from_env(); !(fast == FastPaths::defaults()))
    lines.push_back("Note: fast paths " + fast.str() +
                    " (TRAINER_FAST_PATHS and the like; the default set is every one): the others run "
                    "the paths they replaced");
  std::string mem = "Memory (f32; parameters with gradients and optimizer state; activations with their gradients, "
                    "per batch of " + std::to_string(batch) + "):";
  for (size_t d = 0; d < memory.size(); ++d)
    mem += fmt::format("{} {} {} + {}", d ? "," : "", memory[d].device == "replica" ? "per replica" : memory[d].device,
                       mib(double(memory[d].param_bytes)), mib(double(memory[d].activation_bytes_per_sample) * double(batch)));
  lines.push_back(mem);
  auto opt = make_optimizer(e.optimizer);
  auto schedule = make_schedule(e.schedule, e.train.epochs);
  const std::string smoothing =
      e.train.label_smoothing != 0 ? fmt::format(" with label_smoothing {:g}", e.train.label_smoothing) : std::string();
  lines.push_back(fmt::format("Optimizer {}, effective lr {:g}{}, schedule {}, loss {}{}", opt->describe(), base_lr,
                              lr_factor != 1 ? fmt::format(" (linear scaling x{:g})", lr_factor) : "", schedule->describe(),
                              e.train.loss + smoothing,
                              fused_loss ? fmt::format(" (fused with the output {})", fused_output) : std::string(" (output taken as logits)")) +
                  (e.train.loss_scale.enabled() ? ", loss scale " + e.train.loss_scale.describe() : std::string()) +
                  (e.train.clip.enabled() ? ", gradients " + e.train.clip.describe() : std::string()));
  if (!e.train.class_weight.empty()) {
    std::vector<std::string> w;
    for (const auto& [cls, v] : e.train.class_weight) w.push_back(fmt::format("{}: {:g}", cls, v));
    lines.push_back(fmt::format("Class weights {{{}}} (other classes 1) on the training loss; validation is unweighted",
                                fmt::join(w, ", ")));
  }
  if (!e.optimizer.exclude_from_weight_decay.empty())
    lines.push_back(fmt::format("Weight decay leaves out the parameters matching {}", fmt::join(e.optimizer.exclude_from_weight_decay, ", ")));
  // A per-epoch schedule over a single epoch never leaves its first rate: say so, once.
  if (e.schedule.type != "constant" && !e.schedule.per_step && e.schedule.warmup_epochs == 0 && e.train.epochs == 1)
    lines.push_back(fmt::format("Note: schedule {} changes the rate between epochs and this run has one: the rate stays "
                                "{:g} (schedule.per_step: true moves it every step)",
                                e.schedule.type, base_lr));
  for (const std::string& c : Callbacks(e.callbacks).describe()) lines.push_back("Callback " + c);
  return lines;
}

}  // namespace trainer
