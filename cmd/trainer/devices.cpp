// `trainer devices`: the CPU and CUDA resources this process can see.
#include <fmt/format.h>

#include "cmd/trainer/command.h"
#include "core/engine/devices.h"

namespace trainer::cli {
namespace {

const RegisterCommand reg({"devices", "List the visible CPU cores and GPUs", [](CLI::App&) {
  return [] {
    for (const std::string& l : describe_devices()) fmt::print("{}\n", l);
    return kOk;
  };
}});

}  // namespace
}  // namespace trainer::cli
