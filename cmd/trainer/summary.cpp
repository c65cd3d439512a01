// `trainer summary CONFIG [--set k=v]...`: the Keras-style layer table, parameters and FLOPs.
#include <fmt/format.h>

#include "cmd/trainer/command.h"
#include "core/run/spec.h"
#include "core/graph/summary.h"

namespace trainer::cli {
namespace {

const RegisterCommand reg({"summary", "Print the model's layers, output shapes, parameters and FLOPs", [](CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  app.add_option("config", *config, "RunSpec YAML file")->required();
  app.add_option("--set", *sets, "Override a config key (value parsed as YAML)");
  return [config, sets] {
    RunSpec e = load_run_spec(*config, *sets);
    Graph g(e.model);
    bool placed = e.strategy == StrategyKind::DeviceParallel;
    fmt::print("{}", model_summary(g, e.name, placed ? &e.placement : nullptr, e.train.batch_size));
    return kOk;
  };
}});

}  // namespace
}  // namespace trainer::cli
