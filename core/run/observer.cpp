// The rank-0 observer: the run directory and its files, the console, checkpoints.
#include "core/run/observer.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/checkpoint/resume.h"
#include "core/data/transforms.h"
#include "core/io/curves.h"
#include "core/io/file.h"
#include "core/io/tensorboard.h"

namespace trainer {
namespace {

// A metrics row's values as TensorBoard scalars: each name with `prefix` before it.
std::vector<std::pair<std::string, double>> tagged(const std::string& prefix, const Metrics& row) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, v] : row) out.push_back({prefix + name, v});
  return out;
}

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

}  // namespace

// metrics.csv, metrics.jsonl and curves.png, kept in step.
class Observer::Record {
 public:
  Record(const std::string& run_dir, const std::string& model_name, const MetricRows& earlier)
      : dir_(run_dir), name_(model_name), rows_(earlier), csv_(MetricsLogger::Format::Csv, run_dir + "/metrics.csv", earlier),
        jsonl_(MetricsLogger::Format::Jsonl, run_dir + "/metrics.jsonl", earlier) {}
  // Appends an epoch's row; redraws curves.png (a plot failure is one warning line, once).
  void add(int epoch, const Metrics& row, const Metrics& times, Progress& progress) {
    csv_.write(epoch, row);
    Metrics timed = row;
    timed.insert(timed.end(), times.begin(), times.end());
    jsonl_.write(epoch, timed);
    rows_.push_back({epoch, row});
    std::string error;
    if (!plot_curves(rows_, dir_ + "/curves.png", name_, &error) && !plot_warned_) {
      plot_warned_ = true;
      progress.line("warning: curves.png not drawn: " + error);
    }
  }

 private:
  std::string dir_, name_;
  MetricRows rows_;
  MetricsLogger csv_, jsonl_;
  bool plot_warned_ = false;
};

Observer::Observer(const RunSpec& e, const FitOptions& o, const NormStats* stats, std::vector<std::string> classes,
                   FitResult& result)
    : result_(result), dir_(create_run_dir(o.runs_root, e.name, o.run_dir)), progress_(o.out, o.terminal),
      ckpt_(e.checkpoint, dir_ + "/checkpoints", stats, std::move(classes)) {
  result_.run_dir = dir_;
  write_file_atomic(dir_ + "/config.yaml", cfg::emit(*e.doc));
  if (stats && stats->kind != Augment::Mean::None && !stats->mean.empty()) save_stats(*stats, dir_ + "/norm_stats.npy");
  log_ = std::fopen((dir_ + "/train.log").c_str(), "w");
  if (!log_) throw FileError(fmt::format("cannot write {}/train.log", dir_));
  progress_.set_log(log_);
  const MetricRows earlier = earlier_rows(o.resume);
  record_ = std::make_unique<Record>(dir_, e.name, earlier);
  if (e.logging.tensorboard) open_tensorboard(e, o, earlier);
}

// RUN_DIR/tb: the config, and for a resumed run what the run so far wrote (as the metrics files
// start with its earlier rows): the earlier run's step/* events up to the checkpoint's global step
// and an epoch/* event per earlier row.
void Observer::open_tensorboard(const RunSpec& e, const FitOptions& o, const MetricRows& earlier) {
  tb_ = std::make_unique<EventWriter>(dir_ + "/tb");
  tb_->text(0, "config", markdown_code_block(cfg::emit(*e.doc), "yaml"));
  if (o.resume) {
    for (const std::string& w : carry_events(run_dir_of(*o.resume) + "/tb", "step/", o.resume->state.global_step, *tb_))
      progress_.line("warning: " + w);
  }
  for (const auto& [epoch, row] : earlier) tb_->scalars(epoch, tagged("epoch/", row));
  tb_->flush();
}

Observer::~Observer() {
  if (log_) std::fclose(log_);
}

void Observer::begin_epoch(int epoch, int epochs, int64_t steps) {
  progress_.begin_epoch(epoch + 1, epochs, steps);
  last_update_ = std::chrono::steady_clock::now();
}

void Observer::after_step(int64_t step, double loss, double accuracy, const StepReport* update) {
  progress_.update(step, {{"accuracy", accuracy}, {"loss", loss}});
  if (!update || !tb_) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_update_).count();
  last_update_ = now;
  std::vector<std::pair<std::string, double>> v = {{"step/loss", update->loss},
                                                   {"step/lr", update->lr},
                                                   {"step/samples_per_s", seconds > 0 ? double(update->samples) / seconds : 0}};
  if (std::isfinite(update->grad_norm)) v.push_back({"step/grad_norm", update->grad_norm});
  if (!std::isnan(update->loss_scale)) v.push_back({"step/loss_scale", update->loss_scale});
  tb_->scalars(update->global_step, v);
}

void Observer::end_epoch(int epoch, const Metrics& console, const Metrics& row, const Metrics& times) {
  progress_.end_epoch(console);
  record_->add(epoch, row, times, progress_);
  if (tb_) {  // at metrics.csv's epoch number (from 0, as Keras' TensorBoard callback)
    tb_->scalars(epoch, tagged("epoch/", row));
    tb_->flush();
  }
  result_.last = row;
  result_.epochs_done = epoch + 1;
}

std::string Observer::save(ModelState& m, const TrainState& s, const std::vector<float>* best) {
  result_.checkpoint = ckpt_.save(m, s, best).weights;
  if (tb_) tb_->flush();  // an interrupted run's last steps too
  return result_.checkpoint;
}

}  // namespace trainer
