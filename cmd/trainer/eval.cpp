// `trainer eval RUN_DIR|CHECKPOINT [--split val|test|train] [--data PATH|YAML] [--confusion] [--json] [--no-ema]`
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cmd/trainer/checkpoint_run.h"
#include "cmd/trainer/command.h"
#include "core/io/json_text.h"
#include "core/run/evaluate.h"

namespace trainer::cli {
namespace {

struct EvalArgs {
  std::string target, config, split = "val", data, gpus;
  std::vector<std::string> sets;
  int threads = 0;
  bool confusion = false, json = false, no_ema = false;
};

void print_confusion(const EvalResult& r) {
  size_t k = r.class_names.size();
  if (r.confusion.empty()) {
    fmt::print("No confusion matrix: {} classes, more than {}\n", k, kMaxConfusionClasses);
    return;
  }
  size_t w = 6;
  for (const std::string& n : r.class_names) w = std::max(w, n.size() + 1);
  for (int64_t v : r.confusion) w = std::max(w, std::to_string(v).size() + 1);
  fmt::print("Confusion matrix (rows: true class, columns: predicted class)\n{:>{}}", "", w);
  for (const std::string& n : r.class_names) fmt::print("{:>{}}", n, w);
  fmt::print("\n");
  for (size_t i = 0; i < k; ++i) {
    fmt::print("{:>{}}", r.class_names[i], w);
    for (size_t j = 0; j < k; ++j) fmt::print("{:>{}}", r.confusion[i * k + j], w);
    fmt::print("\n");
  }
}

int eval(const EvalArgs& a) {
  std::vector<std::string> sets = a.sets;
  // --data: a dataset section in YAML ({type: ..., path: ...}) or a path for the split's own reader.
  if (!a.data.empty()) sets.push_back(fmt::format("data.{}{}={}", a.split, a.data.front() == '{' ? "" : ".path", a.data));
  for (const std::string& s : device_overrides(one_gpu(a.gpus), 0, a.threads)) sets.push_back(s);
  const auto [c, e] = open_checkpoint_run(a.target, a.config, sets);
  EvalOptions o;
  o.split = a.split;
  o.weights = a.no_ema ? LoadWeights::Trained : LoadWeights::Average;
  EvalResult r = evaluate_checkpoint(e, c, o);
  if (a.json) {
    const size_t k = r.confusion.empty() ? 0 : r.class_names.size();  // (none past kMaxConfusionClasses: [])
    JsonLine confusion = JsonLine::array();
    for (size_t i = 0; i < k; ++i)
      confusion.push_back(std::vector<int64_t>(r.confusion.begin() + std::ptrdiff_t(i * k),
                                               r.confusion.begin() + std::ptrdiff_t((i + 1) * k)));
    fmt::print("{}\n", json_line({{"checkpoint", c.weights}, {"split", a.split}, {"count", r.count}, {"loss", r.loss},
                                   {"accuracy", r.accuracy}, {"confusion", confusion}}));
    return kOk;
  }
  fmt::print("Checkpoint: {} (epoch {}, step {})\n", c.weights, c.state.epoch + (c.state.step_in_epoch ? 1 : 0),
             c.state.global_step);
  fmt::print("Data ({}): {}\n", a.split, r.dataset);
  fmt::print("{} {} - loss: {:.4f} - accuracy: {:.4f}\n", r.count, r.per_position ? "positions" : "samples", r.loss,
             r.accuracy);
  if (a.confusion) print_confusion(r);
  return kOk;
}

const RegisterCommand reg_eval({"eval", "Evaluate a run's checkpoint on a data split", [](CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  app.add_option("target", a->target, "A run directory (its newest valid checkpoint) or a checkpoint file")->required();
  app.add_option("--split", a->split, "Which data section: val (default), test or train")
      ->check(CLI::IsMember({"val", "test", "train"}));
  app.add_option("--data", a->data, "Evaluate on other data: a path for the split's reader, or a YAML dataset section");
  app.add_option("--config", a->config, "The config to build the model from (default: the run's config.yaml)");
  app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
  app.add_option("--gpus", a->gpus, "Evaluate on this GPU (default: the config's first device)");
  app.add_option("--threads", a->threads, "CPU compute threads")->check(CLI::PositiveNumber);
  app.add_flag("--confusion", a->confusion, "Print the confusion matrix");
  app.add_flag("--json", a->json, "Print one JSON line instead");
  app.add_flag("--no-ema", a->no_ema, "Use the trained weights, not their moving average (train.ema)");
  return [a] { return eval(*a); };
}});

}  // namespace
}  // namespace trainer::cli
