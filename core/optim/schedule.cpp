// The schedules and the `schedule:` section reader.
#include "core/optim/schedule.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <numbers>

namespace trainer {

double Schedule::lr(double base_lr, int epoch, double progress) const {
  double t = per_step ? epoch + progress : double(epoch);
  double f = factor(t);
  if (warmup_epochs > 0) {
    double tw = epoch + progress;  // warmup is always per step
    if (tw < warmup_epochs) f *= warmup_start + (1.0 - warmup_start) * tw / warmup_epochs;
  }
  return base_lr * f;
}

namespace {

struct Constant final : Schedule {
  double factor(double) const override { return 1.0; }
  std::string describe() const override { return "constant"; }
};

// PyImageSearch/Keras: lr0 * (1 - epoch / epochs) ^ power.
struct Poly final : Schedule {
  double power = 1.0;
  double factor(double t) const override { return std::pow(std::max(0.0, 1.0 - t / total_epochs), power); }
  std::string describe() const override { return fmt::format("poly(power={:g}{})", power, per_step ? ", per step" : ""); }
};

struct Step final : Schedule {
  double every = 10, gamma = 0.1;
  double factor(double t) const override { return std::pow(gamma, std::floor(t / every)); }
  std::string describe() const override { return fmt::format("step(every={:g} epochs, gamma={:g})", every, gamma); }
};

struct Cosine final : Schedule {
  double min_factor = 0.0;
  double factor(double t) const override {
    double c = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, t / total_epochs)));
    return min_factor + (1.0 - min_factor) * c;
  }
  std::string describe() const override { return fmt::format("cosine(min_factor={:g})", min_factor); }
};

struct Exponential final : Schedule {
  double gamma = 0.95;
  double factor(double t) const override { return std::pow(gamma, t); }
  std::string describe() const override { return fmt::format("exponential(gamma={:g})", gamma); }
};

// A schedule type: how it reads its keys, and how it is made from a spec.
struct ScheduleType {
  void (*read)(cfg::MapReader&, ScheduleSpec&);
  std::unique_ptr<Schedule> (*make)(const ScheduleSpec&);
};

const std::map<std::string, ScheduleType>& schedule_types() {
  static const std::map<std::string, ScheduleType> types = {
      {"constant", {[](cfg::MapReader&, ScheduleSpec&) {},
                    [](const ScheduleSpec&) -> std::unique_ptr<Schedule> { return std::make_unique<Constant>(); }}},
      {"poly", {[](cfg::MapReader& r, ScheduleSpec& s) { s.power = r.get_float("power", 1.0, 0.0, 100.0); },
                [](const ScheduleSpec& s) -> std::unique_ptr<Schedule> {
                  auto p = std::make_unique<Poly>();
                  p->power = s.power;
                  return p;
                }}},
      {"step", {[](cfg::MapReader& r, ScheduleSpec& s) {
                  s.every = r.get_float("every", 10.0, 1e-9, 1e9);
                  s.gamma = r.get_float("gamma", 0.1, 0.0, 1.0);
                },
                [](const ScheduleSpec& s) -> std::unique_ptr<Schedule> {
                  auto p = std::make_unique<Step>();
                  p->every = s.every, p->gamma = s.gamma;
                  return p;
                }}},
      {"cosine", {[](cfg::MapReader& r, ScheduleSpec& s) { s.min_factor = r.get_float("min_factor", 0.0, 0.0, 1.0); },
                  [](const ScheduleSpec& s) -> std::unique_ptr<Schedule> {
                    auto p = std::make_unique<Cosine>();
                    p->min_factor = s.min_factor;
                    return p;
                  }}},
      {"exponential", {[](cfg::MapReader& r, ScheduleSpec& s) { s.gamma = r.get_float("gamma", 0.95, 0.0, 1.0); },
                       [](const ScheduleSpec& s) -> std::unique_ptr<Schedule> {
                         auto p = std::make_unique<Exponential>();
                         p->gamma = s.gamma;
                         return p;
                       }}},
  };
  return types;
}

}  // namespace

ScheduleSpec read_schedule(const cfg::Node& section) {
  cfg::MapReader r(section, "the schedule section");
  ScheduleSpec s;
  if (!section.defined()) return s;
  std::vector<std::string> names;
  for (const auto& [k, v] : schedule_types()) names.push_back(k);
  s.type = r.get_choice("type", names, "constant");
  schedule_types().at(s.type).read(r, s);
  s.per_step = r.get<bool>("per_step", false);
  s.warmup_epochs = r.get_float("warmup_epochs", 0.0, 0.0, 1e6);
  s.warmup_start = r.get_float("warmup_start", 0.0, 0.0, 1.0);
  r.finish();
  return s;
}

std::unique_ptr<Schedule> make_schedule(const ScheduleSpec& spec, int epochs) {
  std::unique_ptr<Schedule> s = schedule_types().at(spec.type).make(spec);
  s->total_epochs = std::max(1, epochs);
  s->per_step = spec.per_step;
  s->warmup_epochs = spec.warmup_epochs;
  s->warmup_start = spec.warmup_start;
  return s;
}

}  // namespace trainer
