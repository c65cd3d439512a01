// CPU inventory from /proc/cpuinfo, the affinity mask and oneDNN's ISA dispatcher.
#include "core/runtime/cpu_info.h"

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace trainer {
namespace {

// The ISA oneDNN may dispatch to: the machine's, capped by ONEDNN_MAX_CPU_ISA if set.
std::string onednn_isa() {
  static const std::pair<dnnl_cpu_isa_t, const char*> names[] = {
      {dnnl_cpu_isa_sse41, "sse41"},
      {dnnl_cpu_isa_avx, "avx"},
      {dnnl_cpu_isa_avx2, "avx2"},
      {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
      {dnnl_cpu_isa_avx512_core, "avx512_core"},
      {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
      {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
      {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
  };
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  for (const auto& [v, name] : names)
    if (v == isa) return name;
  return fmt::format("0x{:x}", unsigned(isa));
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo c;
  cpu_set_t set;
  CPU_ZERO(&set);
  c.online = int(sysconf(_SC_NPROCESSORS_ONLN));
  c.usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : c.online;
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line) && (c.model.empty() || flags.empty())) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && c.model.empty()) c.model = value;
    if (key == "flags" && flags.empty()) flags = value;
  }
  std::istringstream fs(flags);
  std::vector<std::string> all;
  for (std::string f; fs >> f;) all.push_back(f);
  auto has = [&](const char* f) { return std::find(all.begin(), all.end(), f) != all.end(); };
  for (const char* f : {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"})
    if (has(f)) c.flags.push_back(f);
  c.avx512 = has("avx512f");
  c.avx512_bf16 = has("avx512_bf16");
  c.amx = has("amx_tile");
  c.onednn_isa = onednn_isa();
  return c;
}

}  // namespace trainer
