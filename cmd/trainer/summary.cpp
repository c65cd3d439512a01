// `trainer summary CONFIG [--set k=v]...`: the Keras-style layer table, parameters and FLOPs.
#include <fmt/format.h>

#include "cmd/trainer/command.h"
#include "core/engine/experiment.h"
#include "core/graph/summary.h"

namespace trainer::cli {
namespace {

const RegisterCommand reg({"summary", "Print the model's layers, output shapes, parameters and FLOPs", [](CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  app.add_option("config", *config, "Experiment YAML file")->required();
  app.add_option("--set", *sets, "Override a config key (value parsed as YAML)");
  return [config, sets] {
    Experiment e = load_experiment(*config, *sets);
    Graph g(e.model);
    bool placed = e.strategy == "device_parallel";
    fmt::print("{}", model_summary(g, e.name, placed ? &e.placement : nullptr, e.train.batch_size));
    return kOk;
  };
}});

}  // namespace
}  // namespace trainer::cli
