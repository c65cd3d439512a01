// Device selection, thread budgets, communicators and discovery.
#include "core/runtime/devices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>

#include "core/io/json_text.h"
#include "core/ops/context.h"
#include "core/ops/inventory.h"
#include "core/runtime/cpu_info.h"

namespace trainer {

DevicesSpec read_devices(const cfg::Node& section) {
  cfg::MapReader r(section, "the devices section");
  DevicesSpec d;
  d.node = section;
  cfg::Node gpus = r.optional("gpus");
  if (gpus.is_scalar() && gpus.scalar() == "all") {
    d.all_gpus = true;
    gpus = cfg::Node();
  }
  for (const cfg::Node& g : gpus.items()) {
    int i = g.as<int>();
    if (i < 0) g.fail("GPU ordinals are 0 or more");
    d.gpus.push_back(i);
  }
  d.cpu_replicas = int(r.get_int("cpu", 1, 1, 1024));
  d.threads = int(r.get_int("threads", 0, 0, 4096));
  d.tf32 = r.get<bool>("tf32", true);
  d.workspace_mb = r.get_int("workspace_mb", 0, 0, int64_t(1) << 20);
  d.cuda_graphs = r.get<bool>("cuda_graphs", true);
  r.finish();
  return d;
}

static std::vector<int> gpu_ordinals(std::string& why) {
  std::vector<int> out;
  for (const GpuInfo& g : visible_gpus(&why)) out.push_back(g.index);
  return out;
}

std::vector<Device> select_devices(const DevicesSpec& r) {
  std::vector<Device> out;
  if (!r.gpus.empty() || r.all_gpus) {
    std::string why;
    std::vector<int> vis = gpu_ordinals(why);
    if (vis.empty()) throw DeviceError(fmt::format("GPUs were requested but none is visible: {}", why));
    std::vector<int> want = r.all_gpus ? vis : r.gpus;
    for (int g : want)
      if (std::find(vis.begin(), vis.end(), g) == vis.end())
        throw DeviceError(fmt::format("GPU {} was requested but only {} GPU(s) are visible (ordinals 0-{}; CUDA_VISIBLE_DEVICES "
                                      "renumbers them)", g, vis.size(), vis.size() - 1));
    std::set<int> distinct(want.begin(), want.end());
    if (distinct.size() != 1 && distinct.size() != want.size())
      throw DeviceError("list each GPU once (NCCL between GPUs), or one GPU several times (replicas sharing it); "
                        "not a mix");
    if (!has_backend(DeviceKind::CUDA)) throw DeviceError("this build has no CUDA kernels; train on the CPU (--cpu N)");
    for (int g : want) out.push_back(Device::cuda(g));
    return out;
  }
  for (int i = 0; i < r.cpu_replicas; ++i) out.push_back(Device::cpu(i));
  return out;
}

int threads_per_replica(const DevicesSpec& r, int replicas, int reserved) {
  if (r.threads > 0) return r.threads;
  int hw = std::max(1, int(std::thread::hardware_concurrency()));
  return std::max(1, (hw - std::max(0, reserved)) / std::max(1, replicas));
}

namespace {

const char* yes_no(bool b) { return b ? "yes" : "no"; }

}  // namespace

std::vector<std::string> describe_devices() {
  std::vector<std::string> lines;
  CpuInfo c = cpu_info();
  lines.push_back(fmt::format("cpu: {} logical cores{}{}", c.usable,
                              c.usable != c.online ? fmt::format(" (of {} online)", c.online) : "",
                              c.model.empty() ? "" : ", " + c.model));
  lines.push_back(fmt::format("cpu: oneDNN ISA {}; AVX-512 {}, AVX512-BF16 {}, AMX {} (flags: {})", c.onednn_isa,
                              yes_no(c.avx512), yes_no(c.avx512_bf16), yes_no(c.amx),
                              c.flags.empty() ? "none of avx2/avx512/amx" : fmt::format("{}", fmt::join(c.flags, " "))));
  // What idle OpenMP threads do between parallel regions (libgomp read it at start-up; trainer
  // sets GOMP_SPINCOUNT=3000 when neither variable is given: cmd/trainer/openmp_env.cpp).
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const bool ours = std::getenv("TRAINER_GOMP_SPINCOUNT_DEFAULT") != nullptr;
  lines.push_back(fmt::format("cpu: idle OpenMP threads: {}",
                              policy ? fmt::format("OMP_WAIT_POLICY={} (from the environment)", policy)
                              : spin ? fmt::format("GOMP_SPINCOUNT={} ({})", spin,
                                                   ours ? "trainer's default: spin briefly, then sleep"
                                                        : "from the environment")
                                     : "libgomp's default (spin 300,000 rounds)"));
  GpuInventory inv = gpu_inventory();
  if (inv.gpus.empty()) {
    lines.push_back("cuda: no GPU visible (" + inv.why + ")");
    return lines;
  }
  lines.push_back(fmt::format("cuda: driver {}, runtime {}, cuDNN {}, NCCL {}", inv.driver, inv.runtime,
                              inv.cudnn.empty() ? "unknown" : inv.cudnn, inv.nccl.empty() ? "unknown" : inv.nccl));
  for (const GpuInfo& g : inv.gpus)
    lines.push_back(fmt::format("cuda:{}: {} ({:.1f} GiB, compute capability {}.{})", g.index, g.name,
                                double(g.memory_bytes) / (1 << 30), g.cc_major, g.cc_minor));
  if (!inv.peer.empty()) {
    lines.push_back("peer access (row reads column's memory):");
    std::string head = fmt::format("{:8}", "");
    for (const GpuInfo& g : inv.gpus) head += fmt::format(" {:>7}", fmt::format("cuda:{}", g.index));
    lines.push_back(head);
    for (size_t i = 0; i < inv.gpus.size(); ++i) {
      std::string row = fmt::format("{:8}", fmt::format("cuda:{}", inv.gpus[i].index));
      for (size_t j = 0; j < inv.gpus.size(); ++j) row += fmt::format(" {:>7}", i == j ? "-" : yes_no(inv.peer[i][j]));
      lines.push_back(row);
    }
  }
  return lines;
}

std::string describe_devices_json() {
  CpuInfo c = cpu_info();
  JsonLine j;
  j["cpu"] = {{"logical_cores", c.usable}, {"online_cores", c.online}, {"model", c.model}, {"onednn_isa", c.onednn_isa},
              {"avx512", c.avx512}, {"avx512_bf16", c.avx512_bf16}, {"amx", c.amx}, {"flags", c.flags}};
  GpuInventory inv = gpu_inventory();
  JsonLine gpus = JsonLine::array();
  for (const GpuInfo& g : inv.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                    {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)}});
  auto or_null = [](const std::string& s) { return s.empty() ? JsonLine(nullptr) : JsonLine(s); };
  j["gpus"] = gpus;
  j["no_gpu_reason"] = inv.gpus.empty() ? JsonLine(inv.why) : JsonLine(nullptr);
  j["cuda_driver"] = or_null(inv.driver);
  j["cuda_runtime"] = or_null(inv.runtime);
  j["nccl"] = or_null(inv.nccl);
  j["cudnn"] = or_null(inv.cudnn);
  JsonLine peer = JsonLine::array();
  for (const auto& row : inv.peer) peer.push_back(std::vector<bool>(row.begin(), row.end()));
  j["peer_access"] = peer;
  return json_line(j);
}

}  // namespace trainer
