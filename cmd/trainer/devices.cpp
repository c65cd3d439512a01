// `trainer devices [--json]`: the CPU and CUDA resources this process can see.
#include <fmt/format.h>

#include <memory>

#include "cmd/trainer/command.h"
#include "core/runtime/devices.h"

namespace trainer::cli {
namespace {

const RegisterCommand reg_devices({"devices", "List the visible CPU cores and GPUs", [](CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "Print one JSON object instead of lines");
  return [json] {
    if (*json) fmt::print("{}\n", describe_devices_json());
    else
      for (const std::string& l : describe_devices()) fmt::print("{}\n", l);
    return kOk;
  };
}});

}  // namespace
}  // namespace trainer::cli
