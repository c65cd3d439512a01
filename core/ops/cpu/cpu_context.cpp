// CpuContext: oneDNN engine/stream per replica; OpenMP threads bound per worker thread; the bf16 ISA check, fp16 refused.
#include "core/ops/cpu/cpu_context.h"

#include <omp.h>

#include <cstring>
#include <thread>

#include "core/ops/cpu/cpu_util.h"

namespace trainer {

CpuContext::CpuContext(Device d, const ContextOptions& o)
    : OpContext(d, o.precision, o.fast), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  int hw = int(std::thread::hardware_concurrency());
  threads_ = o.threads > 0 ? o.threads : (hw > 0 ? hw : 1);
  // oneDNN's bf16 convolutions and matmuls need AVX-512 (native with AVX512_BF16, emulated on
  // plain AVX-512); below that it has no bf16 implementation at all and primitive creation fails
  // deep inside a kernel. Refuse at start instead, in one line. The ISA is oneDNN's effective one,
  // so ONEDNN_MAX_CPU_ISA=AVX2 reproduces an older CPU.
  // fp16 exists for GPUs (tensor cores without bf16, e.g. sm_75); oneDNN 2.7 has no fp16
  // convolutions on most CPUs, and the CPU kernels keep no f16 activations.
  if (o.precision == Precision::FP16)
    throw DeviceError("precision fp16 runs on GPUs only: on the CPU use precision: bf16 (same memory, fp32's range, "
                      "no loss scaling needed) or fp32");
  if (bf16()) {
    if (!cpu::cpu_has(dnnl::cpu_isa::avx512_core))
      throw DeviceError("precision bf16 needs a CPU with AVX-512, which oneDNN does not find here (the CPU lacks "
                        "it or ONEDNN_MAX_CPU_ISA caps it): use precision: fp32");
  }
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
