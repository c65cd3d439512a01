// The GPU backend registry behind visible_gpus() and gpu_inventory().
#include "core/ops/inventory.h"

#include <mutex>

namespace trainer {
namespace {

constexpr const char* kNoBackend = "this build has no CUDA backend (configured with TRAINER_CUDA=OFF or without nvcc)";

struct Registry {
  std::mutex mu;
  GpuBackend backend;
  bool set = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

bool backend(GpuBackend& out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.set) out = r.backend;
  return r.set;
}

}  // namespace

void register_gpu_backend(GpuBackend b) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backend = std::move(b);
  r.set = true;
}

std::vector<GpuInfo> visible_gpus(std::string* why) {
  GpuBackend b;
  if (backend(b)) return b.devices(why);
  if (why) *why = kNoBackend;
  return {};
}

GpuInventory gpu_inventory() {
  GpuBackend b;
  if (backend(b)) return b.inventory();
  GpuInventory none;
  none.why = kNoBackend;
  return none;
}

}  // namespace trainer
