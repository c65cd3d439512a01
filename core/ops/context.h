// OpContext: what an op needs from its device (allocator, stream, library handles), one per replica; Scratch, a kernel's grow-only memory.
#pragma once
#include <functional>
#include <memory>
#include <stdexcept>

#include "core/ops/fast_paths.h"
#include "core/tensor/tensor.h"

namespace trainer {

// Training arithmetic. FP32: every tensor is fp32. BF16 and FP16 (mixed precision, as PyTorch's
// autocast): weights, gradients of weights and optimizer state stay fp32 (master weights), while
// the graph keeps activations and their gradients in the low type (bfloat16, or IEEE half) for
// the layers that allow it (Layer::mixed_precision): convolutions compute in it with fp32
// accumulation, memory-bound layers (batch norm, activations, pooling, concat, add, padding) read
// and write it. Dense converts its fp32 operands inside the kernel. FP16 is CUDA-only and needs
// loss scaling (the engine's LossScaler): its range ends at 65504.
enum class Precision { FP32, BF16, FP16 };
inline const char* precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16" : p == Precision::FP16 ? "fp16" : "fp32";
}
// The activation type of the low-precision layers under p (F32 under fp32).
inline DType low_dtype(Precision p) {
  return p == Precision::BF16 ? DType::BF16 : p == Precision::FP16 ? DType::F16 : DType::F32;
}

// A context's work recorded once and replayed as one launch (CUDA: a CUDA graph): the same
// kernels on the same addresses with the same arguments, so what changes between replays must be
// read from device memory the kernels are given (inputs, labels, StepScalars).
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Queues the recorded work on the context's stream again.
  virtual void replay() = 0;
};

class OpContext {
 public:
  explicit OpContext(Device d, Precision p = Precision::FP32, FastPaths f = FastPaths::defaults())
      : device_(d), precision_(p), fast_(f) {}
  virtual ~OpContext() = default;
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  Device device() const { return device_; }
  Precision precision() const { return precision_; }
  // The fast paths this context's kernels may take (ContextOptions::fast), read when a kernel or a
  // shape's plan is made.
  const FastPaths& fast_paths() const { return fast_; }
  virtual Allocator& allocator() = 0;
  // Wait until all work queued on this context has finished (no-op on CPU). A device context
  // counts each wait of the host for its work (count_host_wait).
  virtual void synchronize() {}
  // The same wait, not counted: the frame around timed steps (Trainee::settle), not a step's.
  virtual void drain() {}
  // Byte copies: host<->device and device<->device (all plain memcpy on CPU).
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // Called once on the worker thread that will use this context (binds thread-local state:
  // OpenMP thread count on CPU, the current device on CUDA).
  virtual void bind_thread() {}
  // The most device memory this context's allocator has held at once, in bytes (0 on the CPU,
  // whose memory the process's peak RSS counts).
  virtual size_t device_memory_peak() const { return 0; }
  // Capture (CUDA graphs): every op queued on this context between begin_capture() and
  // end_capture() is recorded, not run, into one CapturedWork. Nothing in between may allocate
  // (the allocator refuses: a recorded address must stay the work's), synchronise, or copy from
  // or to the host. The CPU cannot capture (its ops run as they are called): can_capture() false.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() { throw std::logic_error(device_.str() + " cannot capture work"); }
  virtual std::unique_ptr<CapturedWork> end_capture() { throw std::logic_error(device_.str() + " cannot capture work"); }
  // Ends a capture that failed part-way (an exception between begin and end), discarding it.
  virtual void abort_capture() noexcept {}
  // Whether a capture is under way (begin_capture to end_capture).
  virtual bool capturing() const { return false; }
  // Host work inside recorded work: during a capture, ends the piece recorded so far, keeps `step`
  // and begins the next piece — `step` does not run now (a capture runs nothing) — and every replay
  // of the recording runs the pieces in order with `step` between them (each piece one launch);
  // otherwise runs `step` now. `step` may meet other threads (the in-process communicator's
  // rendezvous) and mark and wait on queues, but never waits for the device, allocates or copies
  // from or to the host.
  virtual void host_step(const std::function<void()>& step) { step(); }
  // A mark behind the work queued on this context so far, and this context's queue waiting for
  // `other`'s latest mark before its later work (CUDA: an event recorded, the stream waiting for
  // it; no host wait). Nothing where work runs as it is called (the CPU). Not inside a capture:
  // in a host_step.
  virtual void mark_queue() {}
  virtual void wait_for_mark(OpContext& /*other*/) {}
  // Numbered marks, each its own: mark_queue_at(k) puts mark k behind the work queued so far, and
  // wait_for_mark_at(other, k) makes this queue wait for `other`'s latest mark k — so that a wait
  // covers the work before one hand-off only, not everything queued since (a pipeline's boundaries:
  // a mark per boundary, micro-batch and direction). reserve_marks(n) makes marks 0..n-1, on the
  // thread bound to this context, before any other thread waits on them. Not inside a capture.
  virtual void reserve_marks(size_t /*n*/) {}
  virtual void mark_queue_at(size_t /*k*/) {}
  virtual void wait_for_mark_at(OpContext& /*other*/, size_t /*k*/) {}
  // Lets this context's queue copy into `other`'s memory directly where the devices allow it
  // (CUDA: peer access between two GPUs that have it; else copy() still works, staged by the
  // driver). Call on the thread bound to this context. Nothing on the CPU.
  virtual void enable_peer(OpContext& /*other*/) {}
  // Blocks handed back to this context's allocator so far. Recorded work stays valid while this
  // does not move: every block it uses is still held by its owner (none could be reused). A
  // growing scratch, arena or input buffer hands its old block back, and the work is recorded again.
  virtual uint64_t released_blocks() const { return 0; }

  // Device memory read back without waiting for it (a step's statistics, read a step or more
  // later): read_back queues a copy of up to kReadBackBytes from `src` behind the work queued so
  // far, into one of kReadBackSlots host buffers of the context (pinned on a GPU), and returns its
  // ticket; read_back_done(t) says whether it has landed; read_back_wait(t) waits where it has not
  // and returns the bytes. A ticket is good until kReadBackSlots later read_backs (then these throw
  // logic_error). A context whose work runs as it is called (the CPU) copies at once.
  static constexpr size_t kReadBackBytes = 4096;  // a step's memory with up to 60 ranks' gathered sums
  static constexpr int kReadBackSlots = 8;
  virtual uint64_t read_back(const void* src, size_t bytes);
  virtual bool read_back_done(uint64_t ticket) const;
  virtual const void* read_back_wait(uint64_t ticket);

  Tensor empty(const Shape& s, DType t = DType::F32) { return Tensor::empty(s, t, allocator()); }
  Tensor zeros(const Shape& s, DType t = DType::F32) {
    Tensor x = empty(s, t);
    fill_zero(x.data(), x.bytes());
    return x;
  }

 protected:
  // read_back's bookkeeping, shared by every context: a new ticket (`bytes` checked against
  // kReadBackBytes), and the slot of a ticket still good (else logic_error).
  uint64_t new_read_ticket(size_t bytes);
  int read_slot(uint64_t ticket) const;

 private:
  Device device_;
  Precision precision_;
  FastPaths fast_;
  uint64_t read_tickets_ = 0;         // read_backs so far
  uint64_t read_owner_[kReadBackSlots] = {};  // each slot's ticket
  struct alignas(16) HostSlot {
    unsigned char bytes[kReadBackBytes];
  };
  std::unique_ptr<HostSlot[]> read_host_;  // the default read_back's copies (made on its first call)
};

// Memory a kernel keeps between calls: grown from its context's allocator when a call needs more
// bytes than it holds, never shrunk, so a step of fixed shapes allocates only on its first call
// (allocator_calls() counts every allocation). The pointer stays valid until a later call asks
// for more. Replacing the block while queued GPU work still reads the old one is safe: the CUDA
// allocator is stream-ordered on the context's one stream.
class Scratch {
 public:
  void* get(OpContext& c, size_t bytes) {
    if (!buf_.defined() || buf_.bytes() < bytes) buf_ = c.empty({int64_t(bytes > 0 ? bytes : 1)}, DType::U8);
    return buf_.data();
  }
  // Room for n elements of T.
  template <class T>
  T* as(OpContext& c, size_t n) {
    return static_cast<T*>(get(c, n * sizeof(T)));
  }
  size_t bytes() const { return buf_.defined() ? buf_.bytes() : 0; }

 private:
  Tensor buf_;
};

struct ContextOptions {
  int threads = 0;                        // CPU: compute threads for this replica (0 = all cores)
  Precision precision = Precision::FP32;  // fp16: CUDA only (the CPU context refuses it)
  int64_t workspace_mb = 0;               // CUDA: convolution workspace budget (0: 1/16 of the device, <= 4 GiB)
  bool tf32 = false;                      // CUDA fp32: TF32 tensor cores in convolutions and GEMMs
  FastPaths fast = FastPaths::from_env();  // the fast paths taken (TRAINER_FAST_PATHS; tests set it)
};

// The times the host has waited for a device's work in this process so far until the device had
// nothing left queued (a stream synchronised, a device-to-host copy, a collective's end; a wait for
// older work — a staging buffer still being read, a read_back not landed — only when it found the
// device idle after it: otherwise the host is running ahead, not synchronising): `trainer bench`
// reports them per timed step (host_syncs_per_step). A CPU context never waits.
void count_host_wait();
uint64_t host_waits();

// The calling thread's host time inside the device calls that queue a step's work, and its waits
// of count_host_wait, so far: what a GPU step's host time is made of (metrics.jsonl's
// time_step_staging_s, time_step_launch_s and host_waits). A CPU context adds nothing.
struct HostCallTimes {
  int64_t staging_ns = 0;  // copies into pinned staging: the memcpy, a wait for a staging buffer, the queued copy
  int64_t launch_ns = 0;   // launches of recorded programs (a CUDA graph's replay)
  uint64_t waits = 0;      // count_host_wait's waits
};
const HostCallTimes& host_call_times();
// The calling thread's HostCallTimes since `from` (an earlier host_call_times() of this thread).
HostCallTimes host_calls_since(const HostCallTimes& from);
// Adds its lifetime to the calling thread's `field` of HostCallTimes.
class HostCallTimer {
 public:
  using Field = int64_t HostCallTimes::*;
  explicit HostCallTimer(Field field);
  ~HostCallTimer();
  HostCallTimer(const HostCallTimer&) = delete;
  HostCallTimer& operator=(const HostCallTimer&) = delete;

 private:
  Field field_;
  int64_t t0_;
};

// Contexts are made through a registry keyed by device kind, so the engine never names a backend.
using ContextFactory = std::function<std::unique_ptr<OpContext>(Device, const ContextOptions&)>;
void register_context(DeviceKind k, ContextFactory f);
bool has_backend(DeviceKind k);
std::unique_ptr<OpContext> make_context(Device d, const ContextOptions& o = {});

}  // namespace trainer
