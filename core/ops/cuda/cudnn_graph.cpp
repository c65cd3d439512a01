// cuDNN's graph (backend) API: attention_graph.h's tensors and operations as backend descriptors, execution plans from cuDNN's heuristics, their execution through a kept variant pack.
#include "core/ops/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/ops/cuda/cuda_context.h"

namespace trainer::cudnn_graph {
namespace {

std::string last_error() {
  char msg[1024] = {};
  cudnnGetLastErrorString(msg, sizeof msg);
  return msg;
}

void check(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const std::string last = last_error();
  const std::string msg = last.empty() ? cudnnGetErrorString(s) : fmt::format("{}: {}", cudnnGetErrorString(s), last);
  cuda_fail(call, msg.c_str(), file, line);
}
#define GRAPH_CHECK(x) check((x), #x, __FILE__, __LINE__)

cudnnDataType_t type_of(attn_graph::Type t, cudnnDataType_t low) {
  switch (t) {
    case attn_graph::Type::F32: return CUDNN_DATA_FLOAT;
    case attn_graph::Type::Low: return low;
    case attn_graph::Type::I32: return CUDNN_DATA_INT32;
    case attn_graph::Type::Bool: return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

Desc tensor(const attn_graph::Tensor& t, cudnnDataType_t low) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = type_of(t.type, low);
  const bool is_virtual = t.is_virtual, by_value = t.by_value;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data())
      .set_int(CUDNN_ATTR_TENSOR_UNIQUE_ID, t.uid)
      .set_int(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)  // the tensor-core engines' requirement
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  return std::move(d.finalize());
}

cudnnPointwiseMode_t pointwise_mode(attn_graph::Op op) {
  using attn_graph::Op;
  switch (op) {
    case Op::Mul: return CUDNN_POINTWISE_MUL;
    case Op::Add: return CUDNN_POINTWISE_ADD;
    case Op::Sub: return CUDNN_POINTWISE_SUB;
    case Op::Div: return CUDNN_POINTWISE_DIV;
    case Op::Exp: return CUDNN_POINTWISE_EXP;
    case Op::Log: return CUDNN_POINTWISE_LOG;
    case Op::GenIndex: return CUDNN_POINTWISE_GEN_INDEX;
    case Op::CmpGe: return CUDNN_POINTWISE_CMP_GE;
    case Op::Select: return CUDNN_POINTWISE_BINARY_SELECT;
    default: break;
  }
  throw DeviceError("cudnn_graph: not a pointwise operation");
}

// One node as an operation descriptor over the tensors' descriptors `t`.
Desc operation(const attn_graph::Node& n, const std::vector<Desc>& t) {
  using attn_graph::Op;
  const auto at = [&](int i) -> const Desc& { return t[size_t(i)]; };
  if (n.op == Op::Matmul) {
    Desc m(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32).finalize();
    Desc o(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    o.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(n.x))
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(n.b))
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(n.y))
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
    return std::move(o.finalize());
  }
  if (n.op == Op::ReduceMax || n.op == Op::ReduceAdd) {
    Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnReduceTensorOp_t mode = n.op == Op::ReduceMax ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32)
        .finalize();
    Desc o(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    o.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(n.x))
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(n.y))
        .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    return std::move(o.finalize());
  }
  if (n.op == Op::Reshape) {
    Desc o(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    o.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(n.x)).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(n.y));
    return std::move(o.finalize());
  }
  Desc p(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnPointwiseMode_t mode = pointwise_mode(n.op);
  // The comparison's math type is boolean (as cudnn-frontend's causal mask), the others' float.
  // As cudnn-frontend's causal mask: the index generators compute in INT32 (their outputs are
  // INT32), the comparison in BOOLEAN, everything else in FLOAT.
  const cudnnDataType_t prec = n.op == Op::CmpGe      ? CUDNN_DATA_BOOLEAN
                               : n.op == Op::GenIndex ? CUDNN_DATA_INT32
                                                      : CUDNN_DATA_FLOAT;
  p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  if (n.op == Op::GenIndex) p.set_int(CUDNN_ATTR_POINTWISE_AXIS, n.axis);
  p.finalize();
  Desc o(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  o.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p).set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(n.x));
  if (n.b >= 0) o.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(n.b));
  if (n.t >= 0) o.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(n.t));
  o.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(n.y));
  return std::move(o.finalize());
}

// cudnn-frontend binds a handle through these two attributes, which cuDNN 9's header marks
// deprecated in favour of device properties; a plan built from device properties alone is meant to
// be serialised and loaded with a handle, so the GPU path keeps the handle.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

// The engine configurations cuDNN's heuristics of `mode` offer for the graph (those that pass
// its support checks), best first.
std::vector<Desc> candidates(const Desc& graph, const Target& t, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (t.device) heur.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *t.device);
  heur.finalize();
  int64_t n = 0;
  GRAPH_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                       nullptr));
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  for (const Desc& c : cfgs) raw.push_back(c.get());
  int64_t got = 0;
  GRAPH_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                       raw.data()));
  cfgs.erase(cfgs.begin() + std::max<int64_t>(0, std::min(got, n)), cfgs.end());
  return cfgs;
}

int64_t engine_index(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
          CUDNN_STATUS_SUCCESS)
    return -1;
  return index;
}

}  // namespace

Desc::Desc(cudnnBackendDescriptorType_t t) { GRAPH_CHECK(cudnnBackendCreateDescriptor(t, &d_)); }
Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}
Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}
Desc& Desc::set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t count, const void* values) {
  GRAPH_CHECK(cudnnBackendSetAttribute(d_, a, t, count, values));
  return *this;
}
Desc& Desc::set(cudnnBackendAttributeName_t a, const Desc& d) {
  cudnnBackendDescriptor_t raw = d.get();
  return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}
Desc& Desc::finalize() {
  GRAPH_CHECK(cudnnBackendFinalize(d_));
  return *this;
}

Desc device_properties(const std::string& json) {
  Desc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  d.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, int64_t(json.size()), json.data());
  return std::move(d.finalize());
}

std::optional<Plan> build(const attn_graph::Graph& g, cudnnDataType_t low, const Target& t,
                          std::vector<Refusal>* refused, int tries) {
  try {
    std::vector<Desc> tensors, ops;
    for (const attn_graph::Tensor& x : g.tensors) tensors.push_back(tensor(x, low));
    for (const attn_graph::Node& n : g.nodes) ops.push_back(operation(n, tensors));
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc& o : ops) raw.push_back(o.get());
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data());
    if (t.handle) graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &t.handle);
    graph.finalize();
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      for (Desc& cfg : candidates(graph, t, mode)) {
        if (tries-- <= 0) return std::nullopt;
        Plan p;
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
        if (t.handle) p.plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &t.handle);
        if (t.device) p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *t.device);
        const cudnnStatus_t s = cudnnBackendFinalize(p.plan.get());
        if (s != CUDNN_STATUS_SUCCESS) {
          if (refused) refused->push_back({engine_index(cfg), s, last_error()});
          continue;
        }
        int64_t n = 0;
        GRAPH_CHECK(cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                             1, &n, &p.workspace));
        p.engine = engine_index(cfg);
        return p;
      }
    }
  } catch (const DeviceError& e) {
    // A descriptor this cuDNN does not take (an older release without one of the operations' forms):
    // no plan, said as a refusal, and the caller's other path runs.
    if (refused) refused->push_back({-1, CUDNN_STATUS_NOT_SUPPORTED, e.what()});
  }
  return std::nullopt;
}

std::string why_not(const std::vector<Refusal>& refused) {
  if (refused.empty())
    return "cuDNN's heuristics offer no engine for this graph (CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr says why)";
  std::string s = "no engine's plan finalized:";
  for (const Refusal& r : refused)
    s += fmt::format(" engine {}: {} ({});", r.engine, cudnnGetErrorString(r.status), r.message);
  s.pop_back();
  return s;
}

Runner::Runner(const attn_graph::Graph& g) {
  for (const attn_graph::Tensor& t : g.tensors)
    if (!t.is_virtual) uids_.push_back(t.uid);
}

void Runner::run(cudnnHandle_t h, const Plan& p, const Pointers& ptrs, void* workspace) {
  if (!pack_ || ptrs != last_ || workspace != last_workspace_) {
    std::vector<int64_t> uids;
    std::vector<void*> data;
    for (const auto& [uid, ptr] : ptrs)
      if (std::find(uids_.begin(), uids_.end(), uid) != uids_.end()) uids.push_back(uid), data.push_back(ptr);
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(data.size()), data.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
        .finalize();
    pack_ = std::move(pack);
    last_ = ptrs;
    last_workspace_ = workspace;
  }
  GRAPH_CHECK(cudnnBackendExecute(h, p.plan.get(), pack_->get()));
}

}  // namespace trainer::cudnn_graph
