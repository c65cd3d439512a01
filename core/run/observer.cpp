// The rank-0 observer: the run directory and its files, the console, checkpoints.
#include "core/run/observer.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/checkpoint/resume.h"
#include "core/data/transforms.h"
#include "core/io/curves.h"
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

}  // namespace

// metrics.csv, metrics.jsonl and curves.png, kept in step.
class Observer::Record {
 public:
  Record(const std::string& run_dir, const std::string& model_name, const MetricRows& earlier)
      : dir_(run_dir), name_(model_name), rows_(earlier), csv_(MetricsLogger::Format::Csv, run_dir + "/metrics.csv", earlier),
        jsonl_(MetricsLogger::Format::Jsonl, run_dir + "/metrics.jsonl", earlier) {}
  // Appends an epoch's row; redraws curves.png (a plot failure is one warning line, once).
  void add(int epoch, const Metrics& row, double seconds, Progress& progress) {
    csv_.write(epoch, row);
    Metrics timed = row;
    timed.push_back({"time_s", seconds});
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

Observer::Observer(const RunSpec& e, const FitOptions& o, const NormStats* stats, FitResult& result)
    : result_(result), dir_(create_run_dir(o.runs_root, e.name, o.run_dir)), progress_(o.out, o.terminal),
      ckpt_(e.checkpoint, dir_ + "/checkpoints", stats) {
  result_.run_dir = dir_;
  write_file_atomic(dir_ + "/config.yaml", cfg::emit(*e.doc));
  if (stats && stats->kind != Augment::Mean::None && !stats->mean.empty()) save_stats(*stats, dir_ + "/norm_stats.npy");
  log_ = std::fopen((dir_ + "/train.log").c_str(), "w");
  if (!log_) throw FileError(fmt::format("cannot write {}/train.log", dir_));
  progress_.set_log(log_);
  record_ = std::make_unique<Record>(dir_, e.name, earlier_rows(o.resume));
}

Observer::~Observer() {
  if (log_) std::fclose(log_);
}

void Observer::after_step(int64_t step, double loss, double accuracy) {
  progress_.update(step, {{"loss", loss}, {"accuracy", accuracy}});
}

void Observer::end_epoch(int epoch, const Metrics& console, const Metrics& row, double seconds) {
  progress_.end_epoch(console);
  record_->add(epoch, row, seconds, progress_);
  result_.last = row;
  result_.epochs_done = epoch + 1;
}

std::string Observer::save(ModelState& m, const TrainState& s) {
  result_.checkpoint = ckpt_.save(m, s).weights;
  return result_.checkpoint;
}

}  // namespace trainer
