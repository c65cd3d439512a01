// CpuContext: oneDNN engine/stream per replica; OpenMP threads bound per worker thread.
#include "core/ops/cpu/cpu_context.h"

#include <omp.h>

#include <cstring>
#include <thread>

namespace trainer {

CpuContext::CpuContext(Device d, const ContextOptions& o)
    : OpContext(d), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  int hw = int(std::thread::hardware_concurrency());
  threads_ = o.threads > 0 ? o.threads : (hw > 0 ? hw : 1);
  bind_thread();
}

void CpuContext::bind_thread() { omp_set_num_threads(threads_); }

void CpuContext::copy_from_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuContext::copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuContext::copy(void* dst, const void* src, size_t bytes) {
  if (dst != src) std::memmove(dst, src, bytes);
}
void CpuContext::fill_zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

static const bool registered = [] {
  register_context(DeviceKind::CPU, [](Device d, const ContextOptions& o) {
    return std::unique_ptr<OpContext>(std::make_unique<CpuContext>(d, o));
  });
  return true;
}();

}  // namespace trainer
