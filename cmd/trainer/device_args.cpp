// Parsing of --gpus / --cpu / --threads into config overrides (shared by run, eval and bench).
#include <algorithm>
#include <cctype>
#include <sstream>

#include "cmd/trainer/command.h"
#include "core/io/config.h"

namespace trainer::cli {

std::string one_gpu(const std::string& gpus) {
  const bool number = !gpus.empty() && std::all_of(gpus.begin(), gpus.end(), [](unsigned char c) { return std::isdigit(c); });
  return number ? gpus + "," : gpus;
}

std::vector<std::string> device_overrides(const std::string& gpus, int cpu, int threads) {
  std::vector<std::string> s;
  if (!gpus.empty()) {
    auto bad = [&] {
      throw cfg::ConfigError("--gpus " + gpus, "expected a GPU count (4), ordinals (0,2 or 0,0 or 1,) or 'all'");
    };
    if (gpus == "all") {
      s.push_back("devices.gpus=all");
    } else {
      std::vector<std::string> parts;
      std::stringstream ss(gpus);
      for (std::string p; std::getline(ss, p, ',');) parts.push_back(p);
      for (const std::string& p : parts)
        if (p.empty() || p.size() > 4 || !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c); }))
          bad();
      std::string list;
      if (parts.size() == 1 && gpus.find(',') == std::string::npos && parts[0] != "0") {
        int n = std::stoi(parts[0]);
        for (int i = 0; i < n; ++i) list += (i ? ", " : "") + std::to_string(i);
      } else {
        for (const std::string& p : parts) list += (list.empty() ? "" : ", ") + p;
      }
      s.push_back("devices.gpus=[" + list + "]");
    }
  }
  if (cpu > 0) {
    // Checked here so the message names --cpu, not the devices.cpu override it becomes (same
    // limit as the config's devices.cpu).
    if (cpu > 1024) throw cfg::ConfigError("--cpu " + std::to_string(cpu), "at most 1024 CPU replicas");
    s.push_back("devices.gpus=[]");
    s.push_back("devices.cpu=" + std::to_string(cpu));
  }
  if (threads > 0) {
    if (threads > 4096) throw cfg::ConfigError("--threads " + std::to_string(threads), "at most 4096 threads per replica");
    s.push_back("devices.threads=" + std::to_string(threads));
  }
  return s;
}

}  // namespace trainer::cli
