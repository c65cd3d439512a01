// CUDA attention through cuDNN's fused flash-attention engines: plans per shape, the low-type copies in and out of f32 tensors (low ones used in place), the variant packs of forward and backward.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/ops/cuda/cuda_attention_cudnn.h"
#include "core/ops/cuda/cuda_dtype.cuh"

namespace trainer::cuda {

struct AttentionCudnn::Entry {
  Entry(const AttentionDims& d, bool bwd, const attn_graph::Graph& g) : key(d), backward(bwd), runner(g), scale(d.scale) {}
  AttentionDims key;  // B, T, S, H, Dk, Dv, causal (the rest is not the plan's)
  bool backward;
  std::optional<cudnn_graph::Plan> plan;
  cudnn_graph::Runner runner;
  // The by-value scalars: the variant pack keeps their addresses.
  float scale, fill = attn_graph::kFillValue, one = 1.0f;
};

struct AttentionCudnn::Buffers {
  LowCopy q, k, v, o, dout;
  Scratch out, dk, dv, sums;  // low-type outputs (O in forward, dQ in backward), the softmax sums (f32)
};

// A call's sizes and its q, k, v in the low type T: tensors of that type as they are (the layer
// computing in it), f32 ones rounded into the buffers' copies (forward and backward both start so).
template <class T>
const T* low_operand(LowCopy& copy, CudaContext& c, const Tensor& t) {
  return t.dtype() == DType::F32 ? copy.of<T>(c, t.f32(), t.numel()) : static_cast<const T*>(t.data());
}

template <class T>
struct LowInputs {
  int64_t nq, nk, nv, no;  // elements of q, k, v and o
  const T *q, *k, *v;
  LowInputs(AttentionCudnn::Buffers& b, CudaContext& c, const AttentionDims& d, const Tensor& q32, const Tensor& k32,
            const Tensor& v32)
      : nq(d.B * d.T * d.H * d.Dk), nk(d.B * d.S * d.H * d.Dk), nv(d.B * d.S * d.H * d.Dv), no(d.B * d.T * d.H * d.Dv),
        q(low_operand<T>(b.q, c, q32)), k(low_operand<T>(b.k, c, k32)), v(low_operand<T>(b.v, c, v32)) {}
};

// Where cuDNN writes an output: into the tensor when it is of the low type, else into `scratch`
// (then widened into the f32 tensor by `settle`).
template <class T>
T* low_output(Scratch& scratch, CudaContext& c, Tensor& t) {
  return t.dtype() == DType::F32 ? scratch.as<T>(c, size_t(t.numel())) : static_cast<T*>(t.data());
}
template <class T>
void settle(CudaContext& c, const T* written, Tensor& t) {
  if (t.dtype() == DType::F32) tmap1(c, written, t.f32(), t.numel(), CopyAsIs{});
}

namespace {

std::atomic<uint64_t> g_runs{0};

bool same_shape(const AttentionDims& a, const AttentionDims& b) {
  return a.B == b.B && a.T == b.T && a.S == b.S && a.H == b.H && a.Dk == b.Dk && a.Dv == b.Dv && a.causal == b.causal &&
         a.scale == b.scale;
}

}  // namespace

uint64_t AttentionCudnn::runs() { return g_runs.load(); }

bool AttentionCudnn::takes(const AttentionDims& d, bool backward, size_t version) {
  if (version < kMinVersion || (version >= 91000 && version < 91002)) return false;
  if (d.rate > 0.0f || d.Dk != d.Dv || d.Dk % 8 != 0 || d.Dk > 256 || d.S < 1 || d.T < 1 || d.B < 1 || d.H < 1)
    return false;
  if (!backward) return true;
  return !(d.T == 1 && d.S == 1) && (version >= kAnyKeysVersion || d.S % 128 == 0);
}

AttentionCudnn::AttentionCudnn(CudaContext& c, DType low) : c_(c), low_(low), b_(std::make_unique<Buffers>()) {}
AttentionCudnn::~AttentionCudnn() = default;

AttentionCudnn::Entry* AttentionCudnn::plan_for(const AttentionDims& d, bool backward) {
  for (auto& e : plans_)
    if (e->backward == backward && same_shape(e->key, d)) return e->plan ? e.get() : nullptr;
  const attn_graph::Graph g = backward ? attn_graph::backward(d) : attn_graph::forward(d);
  auto e = std::make_unique<Entry>(d, backward, g);
  std::vector<cudnn_graph::Refusal> refused;
  const cudnnDataType_t low = low_ == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  e->plan = cudnn_graph::build(g, low, cudnn_graph::Target{c_.cudnn(), nullptr}, &refused);
  const std::string what = std::string("trainer: attention ") + (backward ? "backward" : "forward") + " (B " +
                           std::to_string(d.B) + ", T " + std::to_string(d.T) + ", S " + std::to_string(d.S) + ", H " +
                           std::to_string(d.H) + ", D " + std::to_string(d.Dk) + (d.causal ? ", causal)" : ")");
  const char* log = std::getenv("TRAINER_CUDNN_LOG");
  if (e->plan && log && std::string_view(log) == "1")
    std::fprintf(stderr, "%s: cuDNN engine %lld, workspace %lld bytes\n", what.c_str(), (long long)e->plan->engine,
                 (long long)e->plan->workspace);
  if (!e->plan) std::fprintf(stderr, "%s runs as batched GEMMs: %s\n", what.c_str(), cudnn_graph::why_not(refused).c_str());
  plans_.push_back(std::move(e));
  return plans_.back()->plan ? plans_.back().get() : nullptr;
}

template <class T>
bool AttentionCudnn::run_forward(Entry& e, const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                 Tensor& o, float* lse) {
  const LowInputs<T> in(*b_, c_, d, q, k, v);
  T* ob = low_output<T>(b_->out, c_, o);
  void* ws = e.plan->workspace ? c_.workspace(size_t(e.plan->workspace)) : nullptr;
  using namespace attn_graph;
  e.runner.run(c_.cudnn(), *e.plan,
               {{kQ, const_cast<T*>(in.q)}, {kK, const_cast<T*>(in.k)}, {kV, const_cast<T*>(in.v)}, {kO, ob},
                {kStats, lse}, {kScale, &e.scale}, {kMaskFill, &e.fill}},
               ws);
  settle(c_, static_cast<const T*>(ob), o);
  ++g_runs;
  return true;
}

template <class T>
bool AttentionCudnn::run_backward(Entry& e, const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& o, const float* lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                                  Tensor& dv) {
  const LowInputs<T> in(*b_, c_, d, q, k, v);
  const T* ob = low_operand<T>(b_->o, c_, o);  // forward's output (widened from the low type: the same values)
  const T* dob = low_operand<T>(b_->dout, c_, dout);
  T* dqb = low_output<T>(b_->out, c_, dq);
  T* dkb = low_output<T>(b_->dk, c_, dk);
  T* dvb = low_output<T>(b_->dv, c_, dv);
  float* sums = b_->sums.as<float>(c_, size_t(d.B * d.H * d.T));
  void* ws = e.plan->workspace ? c_.workspace(size_t(e.plan->workspace)) : nullptr;
  using namespace attn_graph;
  e.runner.run(c_.cudnn(), *e.plan,
               {{kQ, const_cast<T*>(in.q)}, {kK, const_cast<T*>(in.k)}, {kV, const_cast<T*>(in.v)},
                {kO, const_cast<T*>(ob)}, {kStats, const_cast<float*>(lse)}, {kDO, const_cast<T*>(dob)}, {kDQ, dqb},
                {kDK, dkb}, {kDV, dvb}, {kScale, &e.scale}, {kMaskFill, &e.fill}, {kOne, &e.one},
                {kSoftmaxSum, sums}},
               ws);
  settle(c_, static_cast<const T*>(dqb), dq);
  settle(c_, static_cast<const T*>(dkb), dk);
  settle(c_, static_cast<const T*>(dvb), dv);
  ++g_runs;
  return true;
}

bool AttentionCudnn::forward(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                             Tensor& lse) {
  if (!takes(d, false) || (q.dtype() != DType::F32 && q.dtype() != low_)) return false;
  Entry* e = plan_for(d, false);
  if (!e) return false;
  return low_ == DType::BF16 ? run_forward<bf16>(*e, d, q, k, v, o, lse.f32())
                             : run_forward<f16>(*e, d, q, k, v, o, lse.f32());
}

bool AttentionCudnn::backward(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& o, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                              Tensor& dv) {
  if (!takes(d, true) || (q.dtype() != DType::F32 && q.dtype() != low_)) return false;
  Entry* e = plan_for(d, true);
  if (!e) return false;
  return low_ == DType::BF16 ? run_backward<bf16>(*e, d, q, k, v, o, lse.f32(), dout, dq, dk, dv)
                             : run_backward<f16>(*e, d, q, k, v, o, lse.f32(), dout, dq, dk, dv);
}

}  // namespace trainer::cuda
