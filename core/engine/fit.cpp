// A training run: devices, data and replicas set up, the run directory created, the start-up
// lines printed, one thread per replica through train_rank(), and every worker stopped when one fails.
#include "core/engine/fit.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "core/dist/launch.h"
#include "core/dist/mpi_world.h"
#include "core/engine/callbacks.h"
#include "core/engine/devices.h"
#include "core/engine/init_from.h"
#include "core/engine/pipeline/pipeline_worker.h"
#include "core/engine/replica_group.h"
#include "core/engine/resume.h"
#include "core/engine/train_loop.h"
#include "core/graph/summary.h"
#include "core/io/file.h"

namespace trainer {
namespace {

// The earlier epochs of the run a checkpoint belongs to (a resumed run's files start with them).
MetricRows earlier_rows(const std::optional<CheckpointInfo>& from) {
  MetricRows rows;
  if (!from) return rows;
  std::string csv = run_dir_of(*from) + "/metrics.csv";
  if (!std::filesystem::exists(csv)) return rows;
  for (auto& r : read_metrics_csv(csv))
    if (r.first < from->state.epoch) rows.push_back(std::move(r));
  return rows;
}

// "Optimizer sgd(...), effective lr ..., loss ... (fused with the output softmax)" and the like,
// from the config alone (the same for every strategy).
std::string optimizer_line(const Experiment& e, const Schedule& schedule, double base_lr, double lr_factor) {
  auto opt = make_optimizer(e.optimizer);
  Graph g(e.model);
  auto cpu = make_context(Device::cpu(0));
  auto loss = make_loss(e.train.loss, *cpu);
  bool fused = loss_head(g, *loss).fused;
  return fmt::format("Optimizer {}, effective lr {:g}{}, schedule {}, loss {}{}", opt->describe(), base_lr,
                     lr_factor != 1 ? fmt::format(" (linear scaling x{:g})", lr_factor) : "", schedule.describe(), e.train.loss,
                     fused ? fmt::format(" (fused with the output {})", loss->fused_output()) : std::string(" (output taken as logits)")) +
         (e.train.loss_scale.enabled() ? ", loss scale " + e.train.loss_scale.describe() : std::string());
}

// "3 devices: gpu:0 (cpu:1000) 2 layers, ..." for a device-parallel run.
std::string placement_line(const Experiment& e, const std::vector<Device>& devices, int threads) {
  std::string s = fmt::format("Devices: device parallel over {} devices:", e.placement.devices.size());
  for (size_t d = 0; d < e.placement.devices.size(); ++d) {
    int layers = 0;
    for (int ld : e.placement.layer_device) layers += ld == int(d);
    std::string where = e.placement.devices[d];
    s += fmt::format("{} {} ({}{}, {} layer{})", d ? "," : "", where, devices[d].str(),
                     devices[d].is_cpu() ? fmt::format(", {} threads", threads) : "", layers, layers == 1 ? "" : "s");
  }
  return s + fmt::format("; batch {}, {} micro-batch{} (GPipe)", e.train.batch_size, e.microbatches, e.microbatches == 1 ? "" : "es");
}

// Every process of a multi-process job must run the same config on as many replicas: checked
// before anything is trained (a mismatch would deadlock or silently diverge).
void check_same_job(const Experiment& e, int local) {
  const std::string mine = fmt::format("{} {}", config_hash(*e.doc), local);
  std::vector<std::string> all = mpi::allgather(mine);
  for (size_t q = 1; q < all.size(); ++q)
    if (all[q] != all[0])
      throw cfg::ConfigError(e.doc->file, fmt::format("process {} runs another config or replica count than process 0 "
                                                      "(config hash and replicas '{}' vs '{}'): every process of the job "
                                                      "must get the same config, overrides and devices",
                                                      q, all[q], all[0]));
}

// Closes a FILE* at scope exit.
struct FileCloser {
  std::FILE* f = nullptr;
  ~FileCloser() {
    if (f) std::fclose(f);
  }
};

}  // namespace

FitResult fit(const Experiment& experiment, const FitOptions& o) {
  Experiment e = experiment;
  const bool pipelined = e.strategy == "device_parallel";
  std::vector<std::string> device_notes;
  std::vector<Device> devices = pipelined ? placement_devices(e.placement, e.devices, &device_notes) : select_devices(e.devices);
  const Launch& proc = this_process();
  if (proc.multi() && pipelined)
    cfg::root(e.doc).child("strategy").fail("device_parallel across processes (mpirun, srun) is not implemented: run the "
                                            "pipeline in one process");
  const int local = pipelined ? 1 : int(devices.size());  // this process's replicas
  const int n = local * proc.size;                         // data-parallel ranks of the whole job
  if (proc.multi()) check_same_job(e, local);
  const std::optional<CheckpointInfo>& from = o.resume;
  double lr_factor = e.lr_scaling == "linear" ? n : 1;
  std::string batch_note;
  if (from) {
    // Keep the checkpoint's global batch, so the batches and schedule continue as they were.
    const TrainState& s = from->state;
    if (s.global_batch % n != 0)
      throw cfg::ConfigError(from->sidecar, fmt::format("the checkpoint's global batch of {} cannot be split over {} replicas",
                                                        s.global_batch, n));
    if (s.replicas != n)
      batch_note = fmt::format(" (the checkpoint's global batch of {} on {} replicas, now {} per replica)", s.global_batch,
                               s.replicas, s.global_batch / n);
    e.train.batch_size = s.global_batch / n;
    lr_factor = s.lr_factor;
  }
  int cpu_devices = 0;
  for (const Device& d : devices) cpu_devices += d.is_cpu();
  int threads = threads_per_replica(e.devices, pipelined ? std::max(1, cpu_devices) : n);
  DataSetup data = setup_data(e, o.base_dir, n, proc.rank * local, local);
  std::unique_ptr<ReplicaGroup> group;
  std::unique_ptr<PipelineWorker> pipe;
  if (pipelined)
    pipe = std::make_unique<PipelineWorker>(e, devices, threads);
  else
    group = std::make_unique<ReplicaGroup>(e, devices, threads);
  Trainee& lead = pipe ? static_cast<Trainee&>(*pipe) : group->worker(0);

  auto schedule = make_schedule(e.schedule, e.train.epochs);
  double base_lr = make_optimizer(e.optimizer)->base_lr() * lr_factor;
  int64_t steps = data.train_loaders[0]->batches_per_epoch();
  if (e.train.steps_per_epoch > 0) steps = std::min(steps, e.train.steps_per_epoch);
  int64_t global_batch = e.train.batch_size * n;
  if (steps == 0)
    throw DataError(fmt::format("the training set has {} samples, fewer than one global batch of {} (drop_last is on)",
                                data.train->size(), global_batch));

  // Weights come in before the run directory exists, so a checkpoint or init.from that does not
  // fit the model fails without leaving an empty run behind. Rank 0 runs on this thread.
  std::vector<std::string> init_lines;
  if (from)
    load_checkpoint(*from, lead.state(), true);
  else if (!e.init.from.empty())
    init_lines = init_from(e.init, o.base_dir, lead.state());

  // Only the job's first process writes the run directory and prints; the others train silently.
  FitResult result;
  const bool writer = proc.rank == 0;
  FileCloser log, quiet;
  std::unique_ptr<RunRecord> record;
  std::unique_ptr<Checkpointer> ckpt;
  if (writer) {
    result.run_dir = create_run_dir(o.runs_root, e.name, o.run_dir);
    write_file_atomic(result.run_dir + "/config.yaml", cfg::emit(*e.doc));
    if (data.stats && data.stats->kind != Augment::Mean::None && !data.stats->mean.empty())
      save_stats(*data.stats, result.run_dir + "/norm_stats.npy");
    log.f = std::fopen((result.run_dir + "/train.log").c_str(), "w");
    if (!log.f) throw FileError(fmt::format("cannot write {}/train.log", result.run_dir));
    record = std::make_unique<RunRecord>(result.run_dir, e.name, earlier_rows(from));
    ckpt = std::make_unique<Checkpointer>(e.checkpoint, result.run_dir + "/checkpoints", data.stats.get());
  } else {
    quiet.f = std::fopen("/dev/null", "w");
  }
  Progress progress(writer ? o.out : quiet.f, writer && o.terminal);
  if (log.f) progress.set_log(log.f);

  const ModelState& ps = lead.state();
  std::string where = n == 1 ? devices[0].str() : fmt::format("{} replicas ({}..{})", n, devices[0].str(), devices.back().str());
  if (proc.multi())
    where = fmt::format("{} replicas in {} processes ({} each: {}; launched by {})", n, proc.size, local,
                        local == 1 ? devices[0].str() : fmt::format("{}..{}", devices[0].str(), devices.back().str()), proc.launcher);
  progress.line(fmt::format("Run directory: {}", result.run_dir));
  if (from) {
    progress.line(fmt::format("Resuming from {}: epoch {}, step {}/{}{}{}", from->weights, from->state.epoch + 1,
                              from->state.step_in_epoch, steps, o.resume_note.empty() ? "" : "; ", o.resume_note));
    if (from->state.config_hash != config_hash(*e.doc))
      progress.line("Note: this config differs from the checkpoint's (beyond devices and checkpoint settings)");
  }
  progress.line(fmt::format("Model {}: {} params ({} trainable), {:.1f} MFLOPs/sample forward", e.name,
                            with_thousands(ps.count(true) + ps.count(false)), with_thousands(ps.count(true)),
                            double(Graph(e.model).flops_per_sample()) / 1e6));
  progress.line(fmt::format("Train: {}", data.train->describe()));
  progress.line(data.val ? fmt::format("Val:   {}", data.val->describe()) : std::string("Val:   none"));
  if (pipelined) {
    progress.line(placement_line(e, devices, threads) + fmt::format(", {} steps/epoch{}", steps, batch_note));
    for (const std::string& l : device_notes) progress.line("Note: " + l);
  } else {
    progress.line(fmt::format("Devices: {}{}; batch {} per replica, global batch {}, {} steps/epoch{}", where,
                              devices[0].is_cpu() ? fmt::format(", {} compute threads each", threads) : "",
                              e.train.batch_size, global_batch, steps, batch_note));
  }
  progress.line(optimizer_line(e, *schedule, base_lr, lr_factor));
  for (const std::string& c : Callbacks(e.callbacks, metric_names(e)).describe()) progress.line("Callback " + c);
  for (const std::string& l : init_lines) progress.line(l);
  if (from && from->state.epoch >= e.train.epochs) {
    progress.line(fmt::format("The checkpoint is at the end of epoch {} of {}: nothing left to train", from->state.epoch,
                              e.train.epochs));
    result.epochs_done = from->state.epoch;
    result.last = from->state.last;
    return result;
  }

  RunShared run{e, o, data, *schedule, base_lr, lr_factor, steps, progress, record.get(), ckpt.get(), result};
  auto t0 = std::chrono::steady_clock::now();
  if (pipe)
    train_rank(*pipe, run);
  else
    group->run([&](Worker& w) { train_rank(w, run); });
  result.interrupted = result.stopped_by == "interrupt";
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.images_per_second = secs > 0 ? double(run.images) / secs : 0;
  return result;
}

}  // namespace trainer
