// Registry of per-device-kind context factories.
#include "core/ops/context.h"

#include <array>
#include <atomic>
#include <stdexcept>

namespace trainer {

static std::atomic<uint64_t> g_host_waits{0};
void count_host_wait() { g_host_waits.fetch_add(1, std::memory_order_relaxed); }
uint64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

static std::array<ContextFactory, kNumDeviceKinds>& context_table() {
  static std::array<ContextFactory, kNumDeviceKinds> t;
  return t;
}

void register_context(DeviceKind k, ContextFactory f) { context_table()[int(k)] = std::move(f); }

bool has_backend(DeviceKind k) { return bool(context_table()[int(k)]); }

std::unique_ptr<OpContext> make_context(Device d, const ContextOptions& o) {
  auto& f = context_table()[int(d.kind)];
  if (!f) throw std::runtime_error(std::string("this build has no ") + device_kind_name(d.kind) + " backend");
  return f(d, o);
}

}  // namespace trainer
