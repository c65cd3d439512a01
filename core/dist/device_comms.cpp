// The choice between LocalComm and a registered communicator kind for one process's replicas.
#include "core/dist/device_comms.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/dist/local_comm.h"

namespace trainer {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, CommunicatorKind> kinds;
  std::map<std::string, ProcessCommunicatorKind> process_kinds;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_communicator_kind(const std::string& name, CommunicatorKind make) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.kinds[name] = std::move(make);
}

void register_process_communicator_kind(const std::string& name, ProcessCommunicatorKind make) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.process_kinds[name] = std::move(make);
}

ProcessCommunicatorKind process_communicator_kind(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.process_kinds.find(name);
  return it == r.process_kinds.end() ? ProcessCommunicatorKind() : it->second;
}

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const std::vector<OpContext*>& contexts) {
  const bool distinct_gpus = devices.size() > 1 && !devices[0].is_cpu() && !(devices[0] == devices[1]);
  const char* force = std::getenv("TRAINER_COMM");
  const bool nccl = distinct_gpus || (force && std::string(force) == "nccl" && !devices[0].is_cpu());
  if (!nccl) return make_local_comms(contexts);
  CommunicatorKind make;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.kinds.find("nccl");
    if (it != r.kinds.end()) make = it->second;
  }
  if (!make) throw DeviceError("several GPUs need NCCL, which this build lacks");
  return make(devices, contexts);
}

}  // namespace trainer
