// The training run: one worker thread per replica (data parallelism; one replica is the
// single-device case), epochs of steps, validation, console and run files, and shutdown of
// every worker when one fails.
#include "core/engine/fit.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "core/engine/data_setup.h"
#include "core/engine/devices.h"
#include "core/engine/interrupt.h"
#include "core/engine/replica_group.h"
#include "core/graph/summary.h"
#include "core/io/run_dir.h"
#include "core/optim/schedule.h"

namespace trainer {
namespace {

// Test hook: TRAINER_INJECT_FAULT=<rank>:<step> makes that replica throw at that global step.
std::pair<int, int64_t> injected_fault() {
  const char* f = std::getenv("TRAINER_INJECT_FAULT");
  int rank = -1;
  long long step = -1;
  if (f && std::sscanf(f, "%d:%lld", &rank, &step) == 2) return {rank, step};
  return {-1, -1};
}

}  // namespace

FitResult fit(const Experiment& e, const FitOptions& o) {
  std::vector<Device> devices = select_devices(e.devices);
  int n = int(devices.size());
  int threads = threads_per_replica(e.devices, n);
  DataSetup data = setup_data(e, o.base_dir, n);

  ReplicaGroup group(e, devices, threads);

  auto schedule = make_schedule(e.schedule, e.train.epochs);
  double lr_factor = e.lr_scaling == "linear" ? n : 1;
  double base_lr = group.worker(0).replica().optimizer().base_lr() * lr_factor;
  int64_t steps = data.train_loaders[0]->batches_per_epoch();
  if (e.train.steps_per_epoch > 0) steps = std::min(steps, e.train.steps_per_epoch);
  int64_t global_batch = e.train.batch_size * n;
  if (steps == 0)
    throw DataError(fmt::format("the training set has {} samples, fewer than one global batch of {} (drop_last is on)",
                                data.train->size(), global_batch));

  FitResult result;
  result.run_dir = create_run_dir(o.runs_root, e.name, o.run_dir);
  write_text_file(result.run_dir + "/config.yaml", cfg::emit(*e.doc));
  if (data.stats && data.stats->kind != Augment::Mean::None && !data.stats->mean.empty())
    save_stats(*data.stats, result.run_dir + "/norm_stats.npy");
  std::FILE* log = std::fopen((result.run_dir + "/train.log").c_str(), "w");
  Progress progress(o.out, o.terminal);
  progress.set_log(log);
  CsvLogger csv(result.run_dir + "/metrics.csv");

  Replica& r0 = group.worker(0).replica();
  const ParamStore& ps = r0.graph().params();
  std::string where = n == 1 ? devices[0].str() : fmt::format("{} replicas ({}..{})", n, devices[0].str(), devices.back().str());
  progress.line(fmt::format("Run directory: {}", result.run_dir));
  progress.line(fmt::format("Model {}: {} params ({} trainable), {:.1f} MFLOPs/sample forward", e.name,
                            with_thousands(ps.count(true) + ps.count(false)), with_thousands(ps.count(true)),
                            double(r0.graph().flops_per_sample()) / 1e6));
  progress.line(fmt::format("Train: {}", data.train->describe()));
  progress.line(data.val ? fmt::format("Val:   {}", data.val->describe()) : std::string("Val:   none"));
  progress.line(fmt::format("Devices: {}{}; batch {} per replica, global batch {}, {} steps/epoch", where,
                            devices[0].is_cpu() ? fmt::format(", {} compute threads each", threads) : "",
                            e.train.batch_size, global_batch, steps));
  progress.line(fmt::format("Optimizer {}, effective lr {:g}{}, schedule {}, loss {}{}", r0.optimizer().describe(), base_lr,
                            lr_factor != 1 ? fmt::format(" (linear scaling x{})", n) : "", schedule->describe(), e.train.loss,
                            r0.fused_softmax() ? " (fused with the output softmax)" : " (output taken as logits)"));

  auto [fault_rank, fault_step] = injected_fault();
  std::atomic<int64_t> images{0};
  std::atomic<bool> stopped{false};
  auto t0 = std::chrono::steady_clock::now();

  auto run_rank = [&](Worker& w) {
    int rank = w.rank();
    Loader& train = *data.train_loaders[size_t(rank)];
    Loader* val = data.val ? data.val_loaders[size_t(rank)].get() : nullptr;
    bool lead = rank == 0;
    w.broadcast_parameters();
    int64_t global_step = 0;
    for (int epoch = 0; epoch < e.train.epochs; ++epoch) {
      if (lead) progress.begin_epoch(epoch + 1, e.train.epochs, steps);
      train.start_epoch(epoch);
      LossStats sum;
      double lr = 0;
      bool stop = false;
      Batch b;
      int64_t step = 0;
      while (step < steps && !stop && train.next(b)) {
        if (rank == fault_rank && global_step == fault_step)
          throw std::runtime_error(fmt::format("injected fault at step {}", global_step));
        lr = schedule->lr(base_lr, epoch, double(step) / double(steps));
        stop = interrupted();
        uint64_t seed = (e.seed * 0x9E3779B97F4A7C15ull + uint64_t(global_step)) * 0xBF58476D1CE4E5B9ull + uint64_t(rank);
        LossStats s = w.train_step(b, float(lr), seed, stop);
        sum.loss_sum += s.loss_sum;
        sum.correct += s.correct;
        sum.count += s.count;
        ++step;
        ++global_step;
        if (lead) {
          images += s.count;
          double c = double(std::max<int64_t>(sum.count, 1));
          if (!std::isfinite(s.loss_sum))
            throw std::runtime_error(fmt::format("the loss became {} at epoch {} step {}", s.loss_sum, epoch + 1, step));
          progress.update(step, {{"loss", sum.loss_sum / c}, {"accuracy", double(sum.correct) / c}});
        }
      }
      if (stop && step < steps) {
        if (lead) {
          stopped = true;
          progress.line(fmt::format("Interrupted at epoch {} step {}/{}", epoch + 1, step, steps));
        }
        return;
      }
      double c = double(std::max<int64_t>(sum.count, 1));
      double loss = sum.loss_sum / c, acc = double(sum.correct) / c;
      Metrics console{{"loss", loss}, {"accuracy", acc}};
      Metrics row{{"accuracy", acc}, {"loss", loss}, {"lr", lr}};
      if (val) {
        LossStats v = w.evaluate(*val);
        double vc = double(std::max<int64_t>(v.count, 1));
        double vl = v.count ? v.loss_sum / vc : NAN, va = v.count ? double(v.correct) / vc : NAN;
        console.push_back({"val_loss", vl});
        console.push_back({"val_accuracy", va});
        row.push_back({"val_accuracy", va});
        row.push_back({"val_loss", vl});
      }
      if (lead) {
        progress.end_epoch(console);
        csv.write(epoch, row);
        result.last = row;
        result.epochs_done = epoch + 1;
      }
      if (stop) {  // asked to stop at the epoch's last step: the epoch is complete
        if (lead) stopped = true;
        return;
      }
    }
  };

  try {
    group.run(run_rank);
  } catch (...) {
    if (log) std::fclose(log);
    throw;
  }
  if (log) std::fclose(log);

  result.interrupted = stopped;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.images_per_second = secs > 0 ? double(images) / secs : 0;
  return result;
}

}  // namespace trainer
