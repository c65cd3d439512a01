// Device selection and discovery.
#include "core/engine/devices.h"

#include <fmt/format.h>

#include <thread>

#include "core/ops/context.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_devices.h"
#endif

namespace trainer {

static std::vector<int> visible_gpus(std::string& why) {
#ifdef TRAINER_HAVE_CUDA
  std::vector<int> out;
  for (const GpuInfo& g : cuda_devices(&why)) out.push_back(g.index);
  return out;
#else
  why = "this build has no CUDA backend (configured with TRAINER_CUDA=OFF or without nvcc)";
  return {};
#endif
}

std::vector<Device> select_devices(const DeviceRequest& r) {
  if (!r.gpus.empty()) {
    std::string why;
    std::vector<int> vis = visible_gpus(why);
    for (int g : r.gpus)
      if (std::find(vis.begin(), vis.end(), g) == vis.end())
        throw DeviceError(vis.empty() ? fmt::format("GPU {} was requested but no GPU is visible: {}", g, why)
                                      : fmt::format("GPU {} was requested but only {} GPU(s) are visible", g, vis.size()));
    if (r.gpus.size() > 1)
      throw DeviceError("several GPUs need the data-parallel engine, which this version does not have yet; use one GPU");
    if (!has_backend(DeviceKind::CUDA))
      throw DeviceError("this build compiles the CUDA runtime but has no CUDA kernels yet; train on the CPU (--cpu 1)");
    return {Device::cuda(r.gpus[0])};
  }
  if (r.cpu_replicas > 1)
    throw DeviceError(fmt::format("{} CPU replicas need the data-parallel engine, which this version does not have yet; "
                                  "use --cpu 1 (all cores serve one replica)", r.cpu_replicas));
  return {Device::cpu(0)};
}

std::vector<std::string> describe_devices() {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("cpu: {} hardware threads", std::thread::hardware_concurrency()));
#ifdef TRAINER_HAVE_CUDA
  std::string why;
  auto gpus = cuda_devices(&why);
  if (gpus.empty()) lines.push_back("cuda: no GPU visible (" + why + ")");
  for (const GpuInfo& g : gpus)
    lines.push_back(fmt::format("cuda:{}: {} ({:.1f} GiB, compute capability {}.{})", g.index, g.name,
                                double(g.memory_bytes) / (1 << 30), g.cc_major, g.cc_minor));
#else
  lines.push_back("cuda: not built into this binary");
#endif
  return lines;
}

}  // namespace trainer
