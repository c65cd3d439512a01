// CudaContext (stream, cuDNN/cuBLAS handles, workspace, pinned staging), the caching CudaAllocator, cuda_fail, and the CUDA context registration.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cublas_loader.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/cuda/workspace_policy.h"

namespace trainer {

void cuda_fail(const char* what, const char* msg, const char* file, int line) {
  // Name the file from the source tree's root ("core/ops/cuda/x.cu"), not the build machine's path.
  std::string f = file;
  size_t at = f.rfind("core/");
  if (at != std::string::npos) f = f.substr(at);
  throw DeviceError(f + ":" + std::to_string(line) + ": " + what + ": " + msg);
}

namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Makes `device` current for the scope (allocator calls may come from any thread).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) CUDA_CHECK(cudaSetDevice(device));
    else prev_ = -1;  // nothing to restore
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);  // best effort; a destructor must not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// CudaAllocator

struct CudaAllocator::Impl {
  mutable std::mutex mu;
  bool capturing = false;
  uint64_t releases = 0;  // deallocate() calls so far
  std::map<size_t, std::vector<void*>> free;  // rounded size -> idle blocks
  size_t cached = 0;    // bytes on the free lists
  size_t reserved = 0;  // bytes obtained from cudaMalloc and not yet returned
  size_t peak = 0;      // the largest `reserved` seen

  // 512 B granularity below 1 MiB (many small tensors share a list), 2 MiB pages above.
  static size_t round(size_t bytes) {
    if (bytes == 0) bytes = 1;  // a zero-element tensor still needs a distinct non-null pointer
    if (bytes < kMiB) return (bytes + 511) & ~size_t(511);
    return (bytes + 2 * kMiB - 1) & ~(2 * kMiB - 1);
  }

  // cudaFree every cached block (caller holds mu and has made the device current). Cached blocks
  // may still be read by queued work of the owning stream, so the device is drained first.
  void release_locked(bool throw_on_error) {
    if (free.empty()) return;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && throw_on_error) cuda_fail("cudaDeviceSynchronize", cudaGetErrorString(e), __FILE__, __LINE__);
    for (auto& [size, list] : free) {
      while (!list.empty()) {
        cudaError_t f = cudaFree(list.back());
        if (f != cudaSuccess && throw_on_error) cuda_fail("cudaFree", cudaGetErrorString(f), __FILE__, __LINE__);
        list.pop_back();
        reserved -= size;
        cached -= size;
      }
    }
    free.clear();
  }
};

CudaAllocator::CudaAllocator(int device) : device_(device), impl_(std::make_unique<Impl>()) {}

CudaAllocator::~CudaAllocator() {
  // Blocks still handed out (tensors outliving their context) are not freed here.
  std::lock_guard<std::mutex> lock(impl_->mu);
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  cudaSetDevice(device_);
  impl_->release_locked(false);
  if (prev >= 0 && prev != device_) cudaSetDevice(prev);
  cudaGetLastError();  // leave no sticky error behind from a failed teardown
}

void CudaAllocator::set_capturing(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->capturing = on;
}

void* CudaAllocator::do_allocate(size_t bytes) {
  const size_t r = Impl::round(bytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->capturing)
    throw DeviceError(cuda::cat("cuda:", device_, ": an allocation of ", bytes, " bytes while a CUDA graph is captured (a step ",
                                "must allocate nothing after its warm-up; devices.cuda_graphs: false runs it uncaptured)"));
  auto it = impl_->free.find(r);
  if (it != impl_->free.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    impl_->cached -= r;
    return p;
  }
  DeviceGuard guard(device_);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, r);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the error and retry once with the cache given back
    impl_->release_locked(true);
    e = cudaMalloc(&p, r);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
      throw DeviceError(cuda::cat("CUDA out of memory on cuda:", device_, ": allocating ", bytes, " bytes (", r,
                                  " after rounding) failed; the GPU has ", free_b / kMiB, " MiB free of ",
                                  total_b / kMiB, " MiB, this replica holds ", impl_->reserved / kMiB,
                                  " MiB (after releasing its cache)"));
    }
  }
  if (e != cudaSuccess) cuda_fail("cudaMalloc", cudaGetErrorString(e), __FILE__, __LINE__);
  impl_->reserved += r;
  impl_->peak = std::max(impl_->peak, impl_->reserved);
  return p;
}

void CudaAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  const size_t r = Impl::round(bytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->free[r].push_back(p);
  impl_->cached += r;
  ++impl_->releases;
}

uint64_t CudaAllocator::releases() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->releases;
}

size_t CudaAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->peak;
}

size_t CudaAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cached;
}

// ---------------------------------------------------------------------------------------------
// CudaContext

CudaContext::CudaContext(Device d, const ContextOptions& o)
    : OpContext(d, o.precision, o.fast),
      index_(d.index),
      workspace_mb_(std::max<int64_t>(o.workspace_mb, 0)),
      tf32_(o.tf32) {
  if (d.kind != DeviceKind::CUDA) throw DeviceError("CudaContext made for " + d.str());
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw DeviceError(cuda::cat("cannot use ", d.str(), ": ", cudaGetErrorString(e)));
  }
  if (index_ < 0 || index_ >= n) throw DeviceError(cuda::cat("cannot use ", d.str(), ": ", n, " GPU(s) visible"));
  try {
    CUDA_CHECK(cudaSetDevice(index_));
    CUDA_CHECK(cudaGetDeviceProperties(&props_, index_));
    // bf16 tensor-core convolutions and GEMMs start with Ampere (cuDNN's PSEUDO_BFLOAT16_CONFIG and
    // cuBLAS's CUDA_R_16BF need compute capability 8.0); fp16 runs on Volta/Turing too.
    if (o.precision == Precision::BF16 && props_.major < 8)
      throw DeviceError(cuda::cat("precision bf16 needs compute capability 8.0 or newer; ", d.str(), " (",
                                  props_.name, ") is ", props_.major, ".", props_.minor,
                                  ": use precision: fp16 (with loss scaling) or fp32"));
    alloc_ = std::make_unique<CudaAllocator>(index_);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (Staging& s : staging_) CUDA_CHECK(cudaEventCreateWithFlags(&s.free, cudaEventDisableTiming));
    for (cudaEvent_t& e : read_done_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&mark_, cudaEventDisableTiming));
    CUDNN_CHECK(cudnnCreate(&cudnn_));
    CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    if (const char* why = cuda::cublas_load_error())
      throw DeviceError(cuda::cat(d.str(), ": cannot load cuBLAS: ", why));
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // fp32 GEMMs (cublasSgemm: dense, LSTM) in TF32 only when asked (ContextOptions::tf32); the
    // default math mode is true fp32. GemmEx with bf16/f16 operands uses tensor cores either way;
    // its split-K partial sums stay fp32 (no reduced-precision reduction, which PyTorch allows by
    // default), so that a bf16/f16 output is rounded once, as the op tests' bounds assume.
    const cublasMath_t math = tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    CUBLAS_CHECK(cublasSetMathMode(cublas_, cublasMath_t(int(math) | int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))));
  } catch (...) {
    release();
    throw;
  }
}

// Frees everything in dependency order; never throws (errors at teardown are ignored).
void CudaContext::release() noexcept {
  cudaSetDevice(index_);
  abort_capture();
  if (stream_) cudaStreamSynchronize(stream_);
  if (workspace_ && alloc_) {
    try {
      alloc_->deallocate(workspace_, workspace_bytes_);
    } catch (...) {
    }
  }
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  alloc_.reset();  // frees the cached device blocks
  if (cublas_) cublasDestroy(cublas_);
  if (cudnn_) cudnnDestroy(cudnn_);
  cublas_ = nullptr;
  cudnn_ = nullptr;
  for (Staging& s : staging_) {
    if (s.p) cudaFreeHost(s.p);
    if (s.free) cudaEventDestroy(s.free);
    s = Staging{};
  }
  if (read_pinned_) cudaFreeHost(read_pinned_);
  read_pinned_ = nullptr;
  for (cudaEvent_t& e : read_done_) {
    if (e) cudaEventDestroy(e);
    e = nullptr;
  }
  if (mark_) cudaEventDestroy(mark_);
  mark_ = nullptr;
  for (cudaEvent_t e : marks_)
    if (e) cudaEventDestroy(e);
  marks_.clear();
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  cudaGetLastError();
}

CudaContext::~CudaContext() { release(); }

void CudaContext::bind_thread() { CUDA_CHECK(cudaSetDevice(index_)); }

void CudaContext::synchronize() {
  count_host_wait();
  drain();
}

void CudaContext::drain() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaContext::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  // Recorded, the host's bytes would be read once into staging and every replay would copy what a
  // later copy left there: refused, so that the step runs as launched (run_program's fallback).
  if (capturing_)
    throw DeviceError(device().str() + ": a copy from host memory while a CUDA graph is captured (a step's inputs go "
                      "into its buffers before the program)");
  HostCallTimer timed(&HostCallTimes::staging_ns);
  const bool small = bytes <= kSmallCopy;
  Staging& s = small ? staging_[next_small_] : staging_[kSmallSlots + next_large_];
  if (small) next_small_ = (next_small_ + 1) % kSmallSlots;
  else next_large_ = (next_large_ + 1) % kLargeSlots;
  // The copy that last read this buffer may still be running: wait for it (an event never
  // recorded counts as complete; a wait only when it has not).
  if (cudaError_t e = cudaEventQuery(s.free); e == cudaErrorNotReady) {
    CUDA_CHECK(cudaEventSynchronize(s.free));
    waited();
  } else {
    CUDA_CHECK(e);
  }
  if (bytes > s.bytes) {
    size_t want = small ? kSmallCopy : (std::max(bytes, s.bytes * 2) + kMiB - 1) & ~(kMiB - 1);
    if (s.p) CUDA_CHECK(cudaFreeHost(s.p));
    s.p = nullptr;
    s.bytes = 0;
    CUDA_CHECK(cudaHostAlloc(&s.p, want, cudaHostAllocDefault));
    s.bytes = want;
  }
  std::memcpy(s.p, src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, s.p, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(s.free, stream_));
}

void CudaContext::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  count_host_wait();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

uint64_t CudaContext::read_back(const void* src, size_t bytes) {
  if (capturing_) throw std::logic_error(device().str() + ": read_back while capturing");
  const uint64_t t = new_read_ticket(bytes);
  const int slot = read_slot(t);
  if (!read_pinned_) CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&read_pinned_), kReadBackSlots * kReadBackBytes,
                                              cudaHostAllocDefault));
  // The slot's last copy was read (its ticket is gone) or dropped; stream order puts this one after it.
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(read_pinned_ + slot * kReadBackBytes, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaEventRecord(read_done_[slot], stream_));
  return t;
}

bool CudaContext::read_back_done(uint64_t ticket) const {
  const cudaError_t e = cudaEventQuery(read_done_[read_slot(ticket)]);
  if (e == cudaErrorNotReady) return false;
  CUDA_CHECK(e);
  return true;
}

const void* CudaContext::read_back_wait(uint64_t ticket) {
  const int slot = read_slot(ticket);
  if (cudaError_t e = cudaEventQuery(read_done_[slot]); e == cudaErrorNotReady) {
    CUDA_CHECK(cudaEventSynchronize(read_done_[slot]));
    waited();
  } else {
    CUDA_CHECK(e);
  }
  return read_pinned_ + slot * kReadBackBytes;
}

void CudaContext::waited() {
  const cudaError_t e = cudaStreamQuery(stream_);
  if (e == cudaSuccess) count_host_wait();  // nothing left queued: the device waits for the host now
  else if (e != cudaErrorNotReady) CUDA_CHECK(e);
}

void CudaContext::copy(void* dst, const void* src, size_t bytes) {
  // cudaMemcpyDefault: also a peer copy between two GPUs (device-parallel boundaries). The ranges
  // must not partially overlap (unlike the CPU backend's memmove).
  if (bytes == 0 || dst == src) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
}

void CudaContext::fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

size_t CudaContext::workspace_budget() const { return cuda::workspace_budget(props_.totalGlobalMem, workspace_mb_); }

void* CudaContext::workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // Exactly what is asked: the largest request comes with the first step's plans (every shape's
  // algorithm is chosen then), so growing stops after it. The old block goes back to the
  // stream-ordered allocator: work already queued may still use it, and anything that reuses it
  // is queued after that work.
  size_t want = bytes;
  void* p = nullptr;
  try {
    p = alloc_->allocate(want);
  } catch (const DeviceError& e) {  // the budget is fixed, not fitted to free memory: say how to lower it
    throw DeviceError(std::string(e.what()) + "; this was the convolution workspace (budget " +
                      std::to_string(workspace_budget() / kMiB) + " MiB): set devices.workspace_mb lower");
  }
  if (workspace_) alloc_->deallocate(workspace_, workspace_bytes_);
  workspace_ = p;
  workspace_bytes_ = want;
  return workspace_;
}

[[maybe_unused]] static const bool registered = [] {
  register_context(DeviceKind::CUDA, [](Device d, const ContextOptions& o) {
    return std::unique_ptr<OpContext>(std::make_unique<CudaContext>(d, o));
  });
  return true;
}();

}  // namespace trainer
