// CudaContext: one GPU replica's stream, cuDNN and cuBLAS(Lt) handles, bounded workspace and
// caching allocators (device memory, pinned host staging); CUDA_CHECK-style error macros.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/ops/context.h"

namespace trainer {

// Throw DeviceError("<file>:<line>: <call>: <library message>") on failure.
[[noreturn]] void cuda_fail(const char* what, const char* msg, const char* file, int line);
#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) ::trainer::cuda_fail(#x, cudaGetErrorString(e_), __FILE__, __LINE__); } while (0)
#define CUDNN_CHECK(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) ::trainer::cuda_fail(#x, cudnnGetErrorString(s_), __FILE__, __LINE__); } while (0)
#define CUBLAS_CHECK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) ::trainer::cuda_fail(#x, cublasGetStatusString(s_), __FILE__, __LINE__); } while (0)

// An owning cuDNN descriptor (one per kind: the ops alias it, e.g. TensorDesc).
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct CudnnDesc {
  T d = nullptr;
  CudnnDesc() { CUDNN_CHECK(Create(&d)); }
  ~CudnnDesc() { Destroy(d); }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
};

// Device memory with per-size free lists: after the first step, the step loop never calls
// cudaMalloc/cudaFree. Blocks are stream-ordered on the owning context's stream.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device);
  ~CudaAllocator() override;
  void deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::cuda(device_); }
  size_t cached_bytes() const;
  size_t peak_bytes() const;  // the most obtained from cudaMalloc at once
  // While a CUDA graph is being captured on the owning stream, allocate() throws: a block handed
  // out then would be baked into the graph and could be reused by others between replays.
  void set_capturing(bool on);
  // Blocks handed back so far (deallocate calls).
  uint64_t releases() const;

 private:
  void* do_allocate(size_t bytes) override;
  struct Impl;
  int device_;
  std::unique_ptr<Impl> impl_;
};

// One piece of a capture: its graph and instantiation (none for a piece without work).
struct CudaGraphPiece {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  void destroy() noexcept;
};

class CudaContext final : public OpContext {
 public:
  CudaContext(Device d, const ContextOptions& o);
  ~CudaContext() override;
  Allocator& allocator() override { return *alloc_; }
  void synchronize() override;
  void drain() override;
  // Host->device through pinned staging, asynchronous on stream(): copies of up to kSmallCopy
  // bytes (labels, a step's scalars) take a ring of small buffers, larger ones (a batch) two
  // large ones in turn, so a step's copies, and the next step's batch while this step runs, need
  // not wait for one another; a buffer is reused only after the copy that used it has finished
  // (a wait, counted: count_host_wait). `src` is read before the call returns, so it may be
  // pageable memory that the caller reuses at once.
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;  // synchronous
  // Into pinned slots, each with an event recorded behind its copy: no wait until read_back_wait
  // finds the copy not yet landed.
  uint64_t read_back(const void* src, size_t bytes) override;
  bool read_back_done(uint64_t ticket) const override;
  const void* read_back_wait(uint64_t ticket) override;
  void copy(void* dst, const void* src, size_t bytes) override;          // async on stream()
  void fill_zero(void* dst, size_t bytes) override;                      // async on stream()
  void bind_thread() override;                                           // cudaSetDevice
  size_t device_memory_peak() const override { return alloc_ ? alloc_->peak_bytes() : 0; }
  // CUDA graphs (cuda_capture.cu): stream capture in thread-local mode, instantiated on end.
  bool can_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;
  void abort_capture() noexcept override;
  bool capturing() const override { return capturing_; }
  void host_step(const std::function<void()>& step) override;
  void mark_queue() override;
  void wait_for_mark(OpContext& other) override;
  void enable_peer(OpContext& other) override;
  void reserve_marks(size_t n) override;
  void mark_queue_at(size_t k) override;
  void wait_for_mark_at(OpContext& other, size_t k) override;
  uint64_t released_blocks() const override { return alloc_ ? alloc_->releases() : 0; }

  cudaStream_t stream() const { return stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  // A scratch buffer of at least `bytes` on this device (grows; an allocation failure is the
  // allocator's out-of-memory DeviceError). The pointer stays valid until a later call asks for
  // more bytes.
  void* workspace(size_t bytes);
  // The most workspace one algorithm may ask for (convolution algorithm choice, made once per
  // shape): cuda::workspace_budget of the device's total memory and ContextOptions::workspace_mb
  // (workspace_policy.h) — never of the memory free now, so a shape's algorithm is fixed.
  size_t workspace_budget() const;
  // fp32 convolutions and GEMMs may use TF32 tensor cores (ContextOptions::tf32; cuBLAS's math
  // mode is set accordingly). Low-precision ones always use tensor cores.
  bool tf32() const { return tf32_; }
  const cudaDeviceProp& properties() const { return props_; }

 private:
  void release() noexcept;  // frees everything created so far (destructor, failed constructor)
  int index_;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudaAllocator> alloc_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int64_t workspace_mb_ = 0;  // ContextOptions::workspace_mb (0: automatic)
  bool tf32_ = false;
  // copy_from_host's staging: slots [0, kSmallSlots) small, then two large, each with the event
  // recorded after the copy that last read it.
  struct Staging {
    void* p = nullptr;
    size_t bytes = 0;
    cudaEvent_t free = nullptr;
  };
  static constexpr size_t kSmallCopy = 64 << 10;
  static constexpr int kSmallSlots = 4, kLargeSlots = 2;
  Staging staging_[kSmallSlots + kLargeSlots];
  int next_small_ = 0, next_large_ = 0;
  // read_back's pinned slots (kReadBackSlots of kReadBackBytes, made on its first call) and the
  // event recorded behind each slot's copy.
  unsigned char* read_pinned_ = nullptr;
  cudaEvent_t read_done_[kReadBackSlots] = {};
  // After a wait of the host for this stream: counts it (count_host_wait) when it left the device
  // with nothing queued — a host synchronisation; a wait for older work while later work runs is
  // the host running ahead of the device, not one.
  void waited();
  cudaDeviceProp props_{};
  // A capture (cuda_capture.cu): begin_capture to end_capture; with host steps, the pieces ended so
  // far (an empty one without a graph) and the steps after them, the stream capturing the next.
  CudaGraphPiece end_piece();
  void drop_pieces() noexcept;
  bool capturing_ = false, stream_capturing_ = false;
  std::vector<CudaGraphPiece> pieces_;
  std::vector<std::function<void()>> steps_;
  cudaEvent_t mark_ = nullptr;  // mark_queue's event
  std::vector<cudaEvent_t> marks_;  // mark_queue_at's (reserve_marks)
};

inline CudaContext& cuda_context(OpContext& c) { return static_cast<CudaContext&>(c); }

}  // namespace trainer
