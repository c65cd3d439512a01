// Keras' EarlyStopping, ReduceLROnPlateau and TerminateOnNaN, rule for rule.
#include "core/run/callbacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/checkpoint/checkpointer.h"  // maximised

namespace trainer {

namespace {

double lookup(const Metrics& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return v;
  return NAN;
}

std::string read_monitor(cfg::MapReader& r, const std::vector<std::string>& metrics) {
  std::string fallback = "val_loss";
  cfg::Node n = r.optional("monitor");
  std::string m = n.defined() ? n.as<std::string>() : fallback;
  if (std::find(metrics.begin(), metrics.end(), m) == metrics.end()) {
    std::string avail;
    for (const std::string& x : metrics) avail += (avail.empty() ? "" : ", ") + x;
    std::string msg = fmt::format("this run has no metric '{}'{}; it has: {}", m, cfg::suggestion(m, metrics), avail);
    if (n.defined()) n.fail(msg);
    r.node().fail(msg + " (monitor defaults to val_loss, which needs data.val or data.validation_split)");
  }
  return m;
}

// Keras' 0.1 spelled as it prints a float32 learning rate.
std::string lr_text(double lr) { return fmt::format("{}", float(lr)); }

}  // namespace

CallbackSpec read_callbacks(const cfg::Node& section, const std::vector<std::string>& metrics) {
  CallbackSpec out;
  if (!section.defined()) return out;
  cfg::MapReader r(section, "the callbacks section");
  if (cfg::Node n = r.optional("early_stopping"); n.defined()) {
    cfg::MapReader c(n, "early_stopping");
    EarlyStoppingSpec e;
    e.monitor = read_monitor(c, metrics);
    e.min_delta = std::abs(c.get_float("min_delta", 0.0, -1e9, 1e9));
    e.patience = int(c.get_int("patience", 0, 0, 1000000));
    e.max = maximised(e.monitor, c.get_choice("mode", {"auto", "min", "max"}, "auto"));
    e.baseline = c.get_float("baseline", NAN, -1e30, 1e30);
    e.restore_best_weights = c.get<bool>("restore_best_weights", false);
    e.start_from_epoch = int(c.get_int("start_from_epoch", 0, 0, 1000000));
    c.finish();
    out.early_stopping = e;
  }
  if (cfg::Node n = r.optional("reduce_lr_on_plateau"); n.defined()) {
    cfg::MapReader c(n, "reduce_lr_on_plateau");
    ReduceLrSpec p;
    p.monitor = read_monitor(c, metrics);
    p.factor = c.get_float("factor", 0.1, 0.0, 1e9);
    if (p.factor >= 1.0) c.required("factor").fail("ReduceLROnPlateau does not support a factor >= 1.0");
    if (p.factor <= 0.0) c.required("factor").fail("must be > 0");
    p.patience = int(c.get_int("patience", 10, 0, 1000000));
    p.min_delta = c.get_float("min_delta", 1e-4, 0.0, 1e9);
    p.cooldown = int(c.get_int("cooldown", 0, 0, 1000000));
    p.min_lr = c.get_float("min_lr", 0.0, 0.0, 1e9);
    p.max = maximised(p.monitor, c.get_choice("mode", {"auto", "min", "max"}, "auto"));
    c.finish();
    out.reduce_lr_on_plateau = p;
  }
  out.terminate_on_nan = r.get<bool>("terminate_on_nan", false);
  r.finish();
  return out;
}

bool Callbacks::on_batch_end(int64_t batch, double loss, std::string* message) {
  if (!terminate_on_nan_ || std::isfinite(loss)) return true;
  *message = fmt::format("Batch {}: Invalid loss, terminating training", batch);
  return false;
}

Callbacks::EpochEnd Callbacks::on_epoch_end(int epoch, const Metrics& row, double lr, bool last) {
  EpochEnd out;
  if (plateau_) {
    ReduceLr& p = *plateau_;
    double current = lookup(row, p.monitor);
    if (!std::isnan(current)) {
      auto better = [&](double a, double b) {
        if (std::isnan(b)) return true;
        return p.max ? a > b + p.min_delta : a < b - p.min_delta;
      };
      if (p.cooldown_counter > 0) {
        --p.cooldown_counter;
        p.wait = 0;
      }
      // Keras asks in_cooldown() again after the decrement: the epoch that ends a cooldown counts
      // toward the wait (so `cooldown: N` skips N - 1 epochs, and 1 none).
      if (better(current, p.best)) {
        p.best = current;
        p.wait = 0;
      } else if (p.cooldown_counter == 0) {
        if (++p.wait >= p.patience) {
          if (float(lr) > float(p.min_lr)) {
            double new_lr = std::max(lr * p.factor, p.min_lr);
            p.scale *= new_lr / lr;
            out.messages.push_back(fmt::format("Epoch {}: ReduceLROnPlateau reducing learning rate to {}.", epoch + 1, lr_text(new_lr)));
            p.cooldown_counter = p.cooldown;
            p.wait = 0;
          }
        }
      }
    }
  }
  if (early_ && epoch >= early_->start_from_epoch) {
    EarlyStopping& e = *early_;
    double current = lookup(row, e.monitor);
    if (!std::isnan(current)) {
      auto improves = [&](double v, double ref) {
        if (std::isnan(ref)) return true;
        return e.max ? v - e.min_delta > ref : v + e.min_delta < ref;
      };
      ++e.wait;
      if (improves(current, e.best)) {
        e.best = current;
        e.best_epoch = epoch;
        out.snapshot_best = e.restore_best_weights;
        if (std::isnan(e.baseline) || improves(current, e.baseline)) e.wait = 0;
      } else if (e.wait >= e.patience && epoch > 0) {
        out.stop = true;
      }
    }
  }
  // Keras 3's on_train_end (keras/src/callbacks/early_stopping.py): the stop's line, then the
  // best epoch's weights put back whether training stopped early or ran its epochs.
  if (early_ && (out.stop || last)) {
    if (out.stop) out.messages.push_back(fmt::format("Epoch {}: early stopping", epoch + 1));
    if (early_->restore_best_weights && early_->best_epoch >= 0) {
      out.restore_best = true;
      out.messages.push_back(fmt::format("Restoring model weights from the end of the best epoch: {}.", early_->best_epoch + 1));
    }
  }
  return out;
}

double Callbacks::adjust_lr(double scheduled) const {
  if (!plateau_ || plateau_->scale == 1) return scheduled;
  return std::max(scheduled * plateau_->scale, plateau_->min_lr);
}

nlohmann::json Callbacks::state() const {
  nlohmann::json j = nlohmann::json::object();
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  if (early_) j["early_stopping"] = {{"wait", early_->wait}, {"best", num(early_->best)}, {"best_epoch", early_->best_epoch}};
  if (plateau_)
    j["reduce_lr_on_plateau"] = {{"wait", plateau_->wait}, {"cooldown_counter", plateau_->cooldown_counter},
                                 {"best", num(plateau_->best)}, {"scale", plateau_->scale}};
  return j;
}

void Callbacks::restore(const nlohmann::json& s) {
  auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; };
  if (early_ && s.contains("early_stopping")) {
    const auto& e = s["early_stopping"];
    early_->wait = e.at("wait").get<int>();
    early_->best = num(e.at("best"));
    early_->best_epoch = e.at("best_epoch").get<int>();
  }
  if (plateau_ && s.contains("reduce_lr_on_plateau")) {
    const auto& p = s["reduce_lr_on_plateau"];
    plateau_->wait = p.at("wait").get<int>();
    plateau_->cooldown_counter = p.at("cooldown_counter").get<int>();
    plateau_->best = num(p.at("best"));
    plateau_->scale = p.at("scale").get<double>();
  }
}

std::vector<std::string> Callbacks::describe() const {
  std::vector<std::string> out;
  if (early_)
    out.push_back(fmt::format("EarlyStopping(monitor={}, mode={}, patience={}, min_delta={:g}{})", early_->monitor,
                              early_->max ? "max" : "min", early_->patience, early_->min_delta,
                              early_->restore_best_weights ? ", restore_best_weights" : ""));
  if (plateau_)
    out.push_back(fmt::format("ReduceLROnPlateau(monitor={}, mode={}, factor={:g}, patience={}, min_lr={:g})", plateau_->monitor,
                              plateau_->max ? "max" : "min", plateau_->factor, plateau_->patience, plateau_->min_lr));
  if (terminate_on_nan_) out.push_back("TerminateOnNaN");
  return out;
}

}  // namespace trainer
