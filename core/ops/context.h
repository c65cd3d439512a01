// OpContext: what an op needs from its device (allocator, stream, library handles), one per replica.
#pragma once
#include <functional>
#include <memory>

#include "core/tensor/tensor.h"

namespace trainer {

class OpContext {
 public:
  explicit OpContext(Device d) : device_(d) {}
  virtual ~OpContext() = default;
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  Device device() const { return device_; }
  virtual Allocator& allocator() = 0;
  // Wait until all work queued on this context has finished (no-op on CPU).
  virtual void synchronize() {}
  // Byte copies: host<->device and device<->device (all plain memcpy on CPU).
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // Called once on the worker thread that will use this context (binds thread-local state:
  // OpenMP thread count on CPU, the current device on CUDA).
  virtual void bind_thread() {}

  Tensor empty(const Shape& s, DType t = DType::F32) { return Tensor::empty(s, t, allocator()); }
  Tensor zeros(const Shape& s, DType t = DType::F32) {
    Tensor x = empty(s, t);
    fill_zero(x.data(), x.bytes());
    return x;
  }

 private:
  Device device_;
};

// The arithmetic of the compute-heavy ops (convolutions, dense). Storage is fp32 either way:
// weights, gradients, optimizer state and every tensor passed between layers. With BF16 the CPU
// kernels convert their operands to bfloat16 and accumulate in fp32 (as PyTorch's CPU autocast).
enum class Precision { FP32, BF16 };
inline const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

struct ContextOptions {
  int threads = 0;                        // CPU: compute threads for this replica (0 = all cores)
  Precision precision = Precision::FP32;  // bf16 is CPU-only (the CUDA context refuses it)
};

// Contexts are made through a registry keyed by device kind, so the engine never names a backend.
using ContextFactory = std::function<std::unique_ptr<OpContext>(Device, const ContextOptions&)>;
void register_context(DeviceKind k, ContextFactory f);
bool has_backend(DeviceKind k);
std::unique_ptr<OpContext> make_context(Device d, const ContextOptions& o = {});

}  // namespace trainer
