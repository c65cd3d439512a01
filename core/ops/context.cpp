// Registry of per-device-kind context factories, the host-wait counter and host call times, and read_back's bookkeeping.
#include "core/ops/context.h"

#include <array>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

namespace trainer {

static std::atomic<uint64_t> g_host_waits{0};
static thread_local HostCallTimes t_host_calls;
void count_host_wait() {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  ++t_host_calls.waits;
}
uint64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }
const HostCallTimes& host_call_times() { return t_host_calls; }
HostCallTimes host_calls_since(const HostCallTimes& from) {
  return {t_host_calls.staging_ns - from.staging_ns, t_host_calls.launch_ns - from.launch_ns, t_host_calls.waits - from.waits};
}

static int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
HostCallTimer::HostCallTimer(Field field) : field_(field), t0_(steady_ns()) {}
HostCallTimer::~HostCallTimer() { t_host_calls.*field_ += steady_ns() - t0_; }

static std::array<ContextFactory, kNumDeviceKinds>& context_table() {
  static std::array<ContextFactory, kNumDeviceKinds> t;
  return t;
}

void register_context(DeviceKind k, ContextFactory f) { context_table()[int(k)] = std::move(f); }

bool has_backend(DeviceKind k) { return bool(context_table()[int(k)]); }

uint64_t OpContext::new_read_ticket(size_t bytes) {
  if (bytes > kReadBackBytes)
    throw std::logic_error("read_back: " + std::to_string(bytes) + " bytes (at most " + std::to_string(kReadBackBytes) + ")");
  const uint64_t t = ++read_tickets_;
  read_owner_[(t - 1) % kReadBackSlots] = t;
  return t;
}

int OpContext::read_slot(uint64_t ticket) const {
  const int slot = ticket > 0 ? int((ticket - 1) % kReadBackSlots) : 0;
  if (ticket == 0 || read_owner_[slot] != ticket)
    throw std::logic_error("read_back: ticket " + std::to_string(ticket) + " is not (or no longer) held (" +
                           std::to_string(kReadBackSlots) + " slots, " + std::to_string(read_tickets_) + " issued)");
  return slot;
}

// The default: the work has run as it was called, so the bytes are copied at once.
uint64_t OpContext::read_back(const void* src, size_t bytes) {
  const uint64_t t = new_read_ticket(bytes);
  if (!read_host_) read_host_ = std::make_unique<HostSlot[]>(kReadBackSlots);
  copy_to_host(read_host_[read_slot(t)].bytes, src, bytes);
  return t;
}

bool OpContext::read_back_done(uint64_t ticket) const {
  read_slot(ticket);
  return true;
}

const void* OpContext::read_back_wait(uint64_t ticket) { return read_host_[read_slot(ticket)].bytes; }

std::unique_ptr<OpContext> make_context(Device d, const ContextOptions& o) {
  auto& f = context_table()[int(d.kind)];
  if (!f) throw std::runtime_error(std::string("this build has no ") + device_kind_name(d.kind) + " backend");
  return f(d, o);
}

}  // namespace trainer
