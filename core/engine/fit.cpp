// The single-device training loop: epochs of train steps, validation, console and run files.
#include "core/engine/fit.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/data/loader.h"
#include "core/engine/data_setup.h"
#include "core/engine/devices.h"
#include "core/engine/interrupt.h"
#include "core/engine/replica.h"
#include "core/graph/summary.h"
#include "core/io/run_dir.h"
#include "core/optim/schedule.h"

namespace trainer {

// Mean loss and accuracy over a whole loader pass in inference mode.
static std::pair<double, double> evaluate(Replica& rep, Loader& loader) {
  LossStats total;
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) {
    LossStats s = rep.eval_step(b.images, b.labels);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
  }
  if (total.count == 0) return {NAN, NAN};
  return {total.loss_sum / double(total.count), double(total.correct) / double(total.count)};
}

FitResult fit(const Experiment& e, const FitOptions& o) {
  std::vector<Device> devices = select_devices(e.devices);
  DataSetup data = setup_data(e, o.base_dir);
  FitResult result;

  Replica rep(e, devices[0], e.devices.threads);
  auto schedule = make_schedule(e.schedule, e.train.epochs);
  Optimizer& opt = rep.optimizer();

  result.run_dir = create_run_dir(o.runs_root, e.name, o.run_dir);
  write_text_file(result.run_dir + "/config.yaml", cfg::emit(*e.doc));
  std::FILE* log = std::fopen((result.run_dir + "/train.log").c_str(), "w");
  Progress progress(o.out, o.terminal);
  progress.set_log(log);
  CsvLogger csv(result.run_dir + "/metrics.csv");

  int64_t steps = data.train_loader->batches_per_epoch();
  if (e.train.steps_per_epoch > 0) steps = std::min(steps, e.train.steps_per_epoch);
  if (steps == 0)
    throw DataError(fmt::format("the training set has {} samples, fewer than one batch of {} (drop_last is on)",
                                data.train->size(), e.train.batch_size));
  const ParamStore& ps = rep.graph().params();
  progress.line(fmt::format("Run directory: {}", result.run_dir));
  progress.line(fmt::format("Model {}: {} params ({} trainable), {:.1f} MFLOPs/sample forward", e.name,
                            with_thousands(ps.count(true) + ps.count(false)), with_thousands(ps.count(true)),
                            double(rep.graph().flops_per_sample()) / 1e6));
  progress.line(fmt::format("Train: {}", data.train->describe()));
  progress.line(data.val ? fmt::format("Val:   {}", data.val->describe()) : std::string("Val:   none"));
  progress.line(fmt::format("Device {} ({} compute threads), batch {} per replica, global batch {}, {} steps/epoch",
                            devices[0].str(), e.devices.threads > 0 ? e.devices.threads : int(std::thread::hardware_concurrency()),
                            e.train.batch_size, e.train.batch_size, steps));
  progress.line(fmt::format("Optimizer {}, schedule {}, loss {}{}", opt.describe(), schedule->describe(), e.train.loss,
                            rep.fused_softmax() ? " (fused with the output softmax)" : " (output taken as logits)"));

  auto t0 = std::chrono::steady_clock::now();
  int64_t images = 0, global_step = 0;
  for (int epoch = 0; epoch < e.train.epochs && !interrupted(); ++epoch) {
    progress.begin_epoch(epoch + 1, e.train.epochs, steps);
    data.train_loader->start_epoch(epoch);
    LossStats sum;
    double lr = 0;
    Batch b;
    int64_t step = 0;
    while (step < steps && data.train_loader->next(b)) {
      lr = schedule->lr(opt.base_lr(), epoch, double(step) / double(steps));
      LossStats s = rep.train_step(b.images, b.labels, float(lr), e.seed * 0x9E3779B97F4A7C15ull + uint64_t(global_step));
      sum.loss_sum += s.loss_sum;
      sum.correct += s.correct;
      sum.count += s.count;
      images += s.count;
      ++step;
      ++global_step;
      progress.update(step, {{"loss", sum.loss_sum / double(sum.count)}, {"accuracy", double(sum.correct) / double(sum.count)}});
      if (!std::isfinite(s.loss_sum)) throw std::runtime_error(fmt::format("the loss became {} at epoch {} step {}", s.loss_sum, epoch + 1, step));
      if (interrupted()) break;
    }
    if (interrupted() && step < steps) {
      result.interrupted = true;
      progress.line(fmt::format("Interrupted at epoch {} step {}/{}", epoch + 1, step, steps));
      break;
    }
    double loss = sum.loss_sum / double(std::max<int64_t>(sum.count, 1));
    double acc = double(sum.correct) / double(std::max<int64_t>(sum.count, 1));
    Metrics console{{"loss", loss}, {"accuracy", acc}};
    Metrics row{{"accuracy", acc}, {"loss", loss}, {"lr", lr}};
    if (data.val_loader) {
      auto [vl, va] = evaluate(rep, *data.val_loader);
      console.push_back({"val_loss", vl});
      console.push_back({"val_accuracy", va});
      row.push_back({"val_accuracy", va});
      row.push_back({"val_loss", vl});
    }
    progress.end_epoch(console);
    csv.write(epoch, row);
    result.last = row;
    result.epochs_done = epoch + 1;
  }
  result.interrupted = result.interrupted || interrupted();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.images_per_second = secs > 0 ? double(images) / secs : 0;
  if (log) std::fclose(log);
  return result;
}

}  // namespace trainer
