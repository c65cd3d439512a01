// The schedules and the `schedule:` section reader.
#include "core/optim/schedule.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <numbers>

namespace trainer {

double Schedule::lr(double base_lr, int epoch, double progress) const {
  const double t = per_step ? epoch + progress : double(epoch);
  const double tw = epoch + progress;  // warmup is always per step
  const bool warming = warmup_epochs > 0 && tw < warmup_epochs;
  const double ramp = warming ? warmup_start + (1.0 - warmup_start) * tw / warmup_epochs : 1.0;
  if (!decay_after_warmup || warmup_epochs <= 0) return base_lr * (factor(t, total_epochs) * ramp);
  if (warming) return base_lr * ramp;
  return base_lr * factor(std::max(0.0, t - warmup_epochs), std::max(total_epochs - warmup_epochs, 1e-9));
}

std::string Schedule::describe() const {
  std::string s = describe_type();
  if (warmup_epochs > 0)
    s += fmt::format(", warmup {:g} epoch{} from {:g}·lr{}", warmup_epochs, warmup_epochs == 1 ? "" : "s",
                     warmup_start, decay_after_warmup ? ", then the decay" : "");
  return s;
}

namespace {

struct Constant final : Schedule {
  double factor(double, double) const override { return 1.0; }
  std::string describe_type() const override { return "constant"; }
};

// PyImageSearch/Keras: lr0 * (1 - epoch / epochs) ^ power.
struct Poly final : Schedule {
  double power = 1.0;
  double factor(double t, double horizon) const override { return std::pow(std::max(0.0, 1.0 - t / horizon), power); }
  std::string describe_type() const override { return fmt::format("poly(power={:g}{})", power, per_step ? ", per step" : ""); }
};

struct Step final : Schedule {
  double every = 10, gamma = 0.1;
  double factor(double t, double) const override { return std::pow(gamma, std::floor(t / every)); }
  std::string describe_type() const override { return fmt::format("step(every={:g} epochs, gamma={:g})", every, gamma); }
};

struct Cosine final : Schedule {
  double min_factor = 0.0;
  double factor(double t, double horizon) const override {
    double c = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, t / horizon)));
    return min_factor + (1.0 - min_factor) * c;
  }
  std::string describe_type() const override { return fmt::format("cosine(min_factor={:g})", min_factor); }
};

struct Exponential final : Schedule {
  double gamma = 0.95;
  double factor(double t, double) const override { return std::pow(gamma, t); }
  std::string describe_type() const override { return fmt::format("exponential(gamma={:g})", gamma); }
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
  s.decay_after_warmup = r.get<bool>("decay_after_warmup", false);
  if (s.decay_after_warmup && s.warmup_epochs <= 0)
    r.optional("decay_after_warmup").fail("decay_after_warmup needs a warmup: give warmup_epochs (above 0)");
  r.finish();
  return s;
}

std::unique_ptr<Schedule> make_schedule(const ScheduleSpec& spec, int epochs) {
  std::unique_ptr<Schedule> s = schedule_types().at(spec.type).make(spec);
  s->total_epochs = std::max(1, epochs);
  s->per_step = spec.per_step;
  s->warmup_epochs = spec.warmup_epochs;
  s->warmup_start = spec.warmup_start;
  s->decay_after_warmup = spec.decay_after_warmup;
  return s;
}

}  // namespace trainer
