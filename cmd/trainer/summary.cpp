// `trainer summary CONFIG [--set k=v]...`: the Keras-style layer table, parameters and FLOPs.
#include <fmt/format.h>

#include "cmd/trainer/command.h"
#include "core/run/plan.h"
#include "core/graph/summary.h"

namespace trainer::cli {
namespace {

const RegisterCommand reg_summary({"summary", "Print the model's layers, output shapes, parameters and FLOPs", [](CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  app.add_option("config", *config, "Experiment YAML file")->required();
  app.add_option("--set", *sets, "Override a config key (value parsed as YAML)");
  return [config, sets] {
    RunSpec e = load_run_spec(*config, *sets);
    const RunPlan plan = plan_model(e);  // the model's graph and sizes; no devices needed
    // The model as written (Keras's summary): zero_pad2d layers with their padded shapes, not
    // folded into their readers as runs execute them (pad_fold).
    const Graph written(e.model);
    fmt::print("{}", model_summary(written, e.name, placed(plan.strategy) ? &e.placement : nullptr, plan.batch));
    if (plan.strategy == StrategyKind::Hybrid) {
      const int devices = e.devices.gpus.empty() ? e.devices.cpu_replicas : int(e.devices.gpus.size());
      const int stages = int(e.placement.devices.size());
      fmt::print("Hybrid: {} copies x {} stages on {} devices ({}: copy r's stage s on device r*{} + s); each copy's devices "
                 "hold the memory per device above, and each copy takes batch_size of the global batch\n",
                 devices / std::max(stages, 1), stages, devices, e.devices.gpus.empty() ? "devices.cpu or --cpu" : "--gpus",
                 stages);
    }
    return kOk;
  };
}});

}  // namespace
}  // namespace trainer::cli
