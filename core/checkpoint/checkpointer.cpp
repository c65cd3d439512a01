// Checkpoint naming, rotation and best-metric tracking.
#include "core/checkpoint/checkpointer.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "core/io/file.h"

namespace fs = std::filesystem;

namespace trainer {

bool maximised(const std::string& metric, const std::string& mode) {
  if (mode == "max") return true;
  if (mode == "min") return false;
  return metric.find("acc") != std::string::npos;
}

CheckpointSpec read_checkpoint_spec(const cfg::Node& section) {
  cfg::MapReader r(section, "the checkpoint section");
  CheckpointSpec c;
  c.every = int(r.get_int("every", 1, 0, 1000000));
  c.every_steps = r.get_int("every_steps", 0, 0, INT64_MAX);
  c.keep = int(r.get_int("keep", 2, 1, 1000000));
  cfg::Node best = r.optional("best");
  std::string mode = r.get_choice("mode", {"auto", "min", "max"}, "auto");
  r.finish();
  if (best.defined()) {
    c.best = best.as<std::string>();
    c.best_max = maximised(c.best, mode);
    c.best_node = best;
  }
  return c;
}

Checkpointer::Checkpointer(const CheckpointSpec& o, std::string dir, const NormStats* stats,
                           std::vector<std::string> classes)
    : o_(o), dir_(std::move(dir)), stats_(stats), classes_(std::move(classes)), best_(o.best_max ? -INFINITY : INFINITY) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw FileError(fmt::format("cannot create {}: {}", dir_, ec.message()));
}

CheckpointInfo Checkpointer::save(ModelState& r, const TrainState& s, const std::vector<float>* best) {
  std::string stem = s.step_in_epoch == 0 ? fmt::format("epoch-{:04d}", s.epoch)
                                          : fmt::format("epoch-{:04d}-step-{:06d}", s.epoch + 1, s.step_in_epoch);
  CheckpointInfo c = save_checkpoint(dir_, stem, r, stats_, s, classes_, best);
  prune();
  return c;
}

void Checkpointer::prune() {
  std::vector<CheckpointInfo> all = list_checkpoints(dir_, nullptr, false);  // sidecars: save() checked the new one
  int kept = 0;
  for (const CheckpointInfo& c : all) {
    if (fs::path(c.sidecar).stem() == "best") continue;
    if (++kept <= o_.keep) continue;
    std::error_code ec;
    fs::remove(c.sidecar, ec);  // the sidecar first: a half-deleted pair is simply invalid
    fs::remove(c.weights, ec);
  }
}

std::string Checkpointer::update_best(ModelState& r, const TrainState& s, const Metrics& row) {
  if (o_.best.empty()) return "";
  double v = NAN;
  for (const auto& [k, x] : row)
    if (k == o_.best) v = x;
  int epoch = s.epoch;  // epochs done, so also the finished epoch's 1-based number
  if (std::isnan(v)) return fmt::format("Epoch {}: {} is not available, skipping", epoch, o_.best);
  if (o_.best_max ? v > best_ : v < best_) {
    std::string line = fmt::format("Epoch {}: {} improved from {:.5f} to {:.5f}, saving model to {}/best.safetensors", epoch,
                                   o_.best, best_, v, dir_);
    best_ = v;
    TrainState with_best = s;
    with_best.callbacks["checkpoint"] = state();
    save_checkpoint(dir_, "best", r, stats_, with_best, classes_);
    return line;
  }
  return fmt::format("Epoch {}: {} did not improve from {:.5f}", epoch, o_.best, best_);
}

nlohmann::json Checkpointer::state() const {
  if (o_.best.empty() || !std::isfinite(best_)) return nlohmann::json::object();
  return {{"monitor", o_.best}, {"best", best_}};
}

void Checkpointer::restore(const nlohmann::json& j) {
  if (j.is_object() && j.contains("best") && j.value("monitor", "") == o_.best) best_ = j["best"].get<double>();
}

}  // namespace trainer
