// Device selection, thread budgets, communicators and discovery.
#include "core/engine/devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>

#include "core/dist/local_comm.h"
#include "core/ops/context.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/dist/nccl_comm.h"
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
  std::vector<Device> out;
  if (!r.gpus.empty() || r.all_gpus) {
    std::string why;
    std::vector<int> vis = visible_gpus(why);
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

int threads_per_replica(const DeviceRequest& r, int replicas) {
  if (r.threads > 0) return r.threads;
  int hw = std::max(1, int(std::thread::hardware_concurrency()));
  return std::max(1, hw / std::max(1, replicas));
}

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const std::vector<OpContext*>& contexts) {
  bool distinct_gpus = devices.size() > 1 && !devices[0].is_cpu() && !(devices[0] == devices[1]);
  // TRAINER_COMM=nccl forces NCCL for GPU replicas (a one-rank NCCL check on a one-GPU machine).
  const char* force = std::getenv("TRAINER_COMM");
  bool nccl = distinct_gpus || (force && std::string(force) == "nccl" && !devices[0].is_cpu());
  if (!nccl) return make_local_comms(contexts);
#ifdef TRAINER_HAVE_CUDA
  return make_nccl_comms(devices, contexts);
#else
  throw DeviceError("several GPUs need NCCL, which this build lacks");
#endif
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
