// CpuContext: a CPU replica's oneDNN engine and stream, its compute-thread budget and precision.
#pragma once
#include <dnnl.hpp>

#include "core/ops/context.h"

namespace trainer {

class CpuContext final : public OpContext {
 public:
  // Throws DeviceError when o asks for bf16 and oneDNN cannot do it on this CPU.
  CpuContext(Device d, const ContextOptions& o);
  Allocator& allocator() override { return host_allocator(); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void bind_thread() override;

  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }
  int threads() const { return threads_; }
  // Mixed precision (see Precision): dense converts its operands to bf16 inside the kernel.
  bool bf16() const { return precision() == Precision::BF16; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  int threads_;
};

// The CpuContext behind a generic context (kernels registered for CPU receive only these).
inline CpuContext& cpu_context(OpContext& c) { return static_cast<CpuContext&>(c); }

}  // namespace trainer
