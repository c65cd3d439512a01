// Helpers shared by the CPU kernels: capability refusals, oneDNN descriptors, per-shape caches, scratch.
#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <dnnl.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace trainer::cpu {

// Loops over fewer elements than this run on the calling thread: an OpenMP fork/join costs more.
constexpr int64_t kParallelGrain = 1 << 15;

template <class... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... args) {
  throw std::invalid_argument(fmt::format(f, std::forward<A>(args)...));
}

// Capability: the CPU kernels store activations as f32 or bf16 only. The op headers' checks accept
// every float type (f16 is the CUDA backend's fp16 mixed precision, which the CPU context refuses),
// so a CPU kernel that reads or writes activations refuses f16 with this.
inline void refuse_f16(const char* op, const char* name, const Tensor& t) {
  if (t.dtype() == DType::F16) fail("{}: {} is f16, which the CPU backend does not support (fp16 is CUDA-only)", op, name);
}

// oneDNN's NCHW-ordered dims for an NHWC tensor [N,H,W,C].
inline dnnl::memory::dims nchw_dims(const Shape& s) { return {s[0], s[3], s[1], s[2]}; }

inline dnnl::memory::desc nhwc_md(const Shape& s, dnnl::memory::data_type t = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc(nchw_dims(s), t, dnnl::memory::format_tag::nhwc);
}

inline dnnl::memory mem(const dnnl::memory::desc& md, dnnl::engine& eng, const void* p) {
  return dnnl::memory(md, eng, const_cast<void*>(p));
}

// A small map from a shape key to per-shape state (oneDNN primitives, workspaces). The batch may
// change between calls (training batch, last partial batch, evaluation), so a few entries are kept;
// the oldest is dropped beyond `kMax`.
template <class Value, size_t kMax = 8>
class ShapeCache {
 public:
  using Key = std::vector<int64_t>;
  template <class Make>
  Value& get(const Key& k, Make&& make) {
    for (auto& e : entries_)
      if (e.first == k) return *e.second;
    if (entries_.size() >= kMax) entries_.erase(entries_.begin());
    entries_.emplace_back(k, std::make_unique<Value>(make()));
    return *entries_.back().second;
  }
  Value* find(const Key& k) {
    for (auto& e : entries_)
      if (e.first == k) return e.second.get();
    return nullptr;
  }
  void erase(const Key& k) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == k) {
        entries_.erase(it);
        return;
      }
  }

 private:
  std::vector<std::pair<Key, std::unique_ptr<Value>>> entries_;
};

// Grow-only 64-byte aligned buffers, one set per thread (a replica's kernels run on its worker
// thread, one at a time). `slot` distinguishes buffers needed at the same time.
void* thread_scratch(int slot, size_t bytes);
enum ScratchSlot {
  kScratchDnnl = 0,
  kScratchReduce = 1,
  kScratchBf16Src = 2,
  kScratchBf16Grad = 3,
  kScratchTranspose = 4,
  kScratchTransposedW = 5,
  kScratchSlots = 6
};

// out[j] = Σ_rows x[row, j] for x [rows, cols] (f32 or bf16, densely stored), in double: fixed
// blocks of rows summed in parallel, the blocks' sums then added in block order. The blocks depend
// on rows alone: the same bits at any thread count. The bias gradients of dense and bias_add. The
// partial sums live in the calling thread's kScratchReduce.
void column_sums(const char* op, const Tensor& x, int64_t rows, int64_t cols, float* out);

// A oneDNN scratchpad memory for a primitive descriptor (user scratchpad mode).
inline dnnl::memory scratchpad(const dnnl::primitive_desc_base& pd, dnnl::engine& eng) {
  dnnl::memory::desc md = pd.scratchpad_desc();
  return dnnl::memory(md, eng, thread_scratch(kScratchDnnl, md.get_size()));
}

// Mixed precision (ContextOptions::precision bf16): an f32 -> bf16 conversion made once per shape
// plan, a oneDNN reorder from the user's f32 layout to a bf16 one (plain, or the blocked layout a
// primitive asks for). It writes into a buffer of to.get_size() bytes that the caller provides:
// a plan's own buffer or thread_scratch.
struct Bf16Convert {
  dnnl::memory::desc from, to;
  dnnl::reorder r;

  Bf16Convert() = default;
  Bf16Convert(dnnl::engine& eng, const dnnl::memory::desc& f, const dnnl::memory::desc& t)
      : from(f), to(t), r(dnnl::reorder::primitive_desc(eng, f, eng, t)) {}
  // Queues the conversion of `src` into `dst` on `s` and returns `dst` as a oneDNN memory.
  dnnl::memory run(dnnl::engine& eng, dnnl::stream& s, const void* src, void* dst) const {
    dnnl::memory in = mem(from, eng, src), out = mem(to, eng, dst);
    r.execute(s, in, out);
    return out;
  }
};

// Whether oneDNN finds every instruction set of `need` here (the CPU has it and ONEDNN_MAX_CPU_ISA
// does not cap it): what our own AVX-512 kernels ask before they run.
inline bool cpu_has(dnnl::cpu_isa need) {
  return (unsigned(dnnl::get_effective_cpu_isa()) & unsigned(need)) == unsigned(need);
}

// Row-major single-precision GEMM through oneDNN's sgemm, on the calling thread's OpenMP team:
// c = op(a)·op(b) + beta·c, op(a) m×k, op(b) k×n ('N' or 'T'). `who` names the op in the error.
void sgemm(const char* who, char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// y [n,u] = x [n,k] · w [k,u] (+ b [u] on every row when b is not null), all f32 and row-major:
// a dense layer over the last axis, and a 1x1 convolution at stride 1 on NHWC rows (w in HWIO).
void linear_forward_f32(const char* who, int64_t n, int64_t k, int64_t u, const float* x, const float* w,
                        const float* b, float* y);

inline dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

}  // namespace trainer::cpu
