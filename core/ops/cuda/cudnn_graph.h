// cuDNN's graph (backend) API for the operation graphs of attention_graph.h: owned descriptors, execution plans built for a GPU's handle or, with no GPU, for a device's recorded properties, and their execution.
#pragma once
#include <cudnn.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/math/attention_graph.h"

namespace trainer::cudnn_graph {

// An owned cudnnBackendDescriptor_t with typed attribute setters; each call is checked (a failure
// throws DeviceError with file:line, the call, cuDNN's status and its last error message).
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t t);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  // Sets `count` values of attribute `a`, of cuDNN type `t`.
  Desc& set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t count, const void* values);
  Desc& set(cudnnBackendAttributeName_t a, const Desc& d);
  Desc& set_int(cudnnBackendAttributeName_t a, int64_t v) { return set(a, CUDNN_TYPE_INT64, 1, &v); }
  Desc& finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// What a plan is built for: the GPU of a cuDNN handle, or a device described by its properties (cuDNN
// ≥ 9.8 finalizes engines for them without a GPU: its support checks run and, where the driver
// library is present, its kernels compile).
struct Target {
  cudnnHandle_t handle = nullptr;
  const Desc* device = nullptr;  // a finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR
};

// A device's properties from their JSON form (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION).
Desc device_properties(const std::string& json);

struct Plan {
  Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace = 0;  // bytes
  int64_t engine = -1;    // cuDNN's global engine index (for messages)
};

// An engine configuration that cuDNN's heuristics offered and whose plan did not finalize.
struct Refusal {
  int64_t engine = -1;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string message;  // cuDNN's last error message
};

// The graph's execution plan: cuDNN's heuristic candidates (those that pass its support checks:
// mode A, then its fallback list), the first that finalizes for `t`. `low`: the Low type's cuDNN
// type. The candidates refused on the way are appended to `refused` (when given); none at all and
// no plan: the heuristics offered nothing. At most `tries` candidates are finalized (each compiles
// its kernel: the tests without a GPU try one).
std::optional<Plan> build(const attn_graph::Graph& g, cudnnDataType_t low, const Target& t,
                          std::vector<Refusal>* refused = nullptr, int tries = 1 << 30);
// Why build() gave no plan, in one line.
std::string why_not(const std::vector<Refusal>& refused);

// The buffers of one execution, by uid: device pointers, host pointers for by-value scalars.
using Pointers = std::vector<std::pair<int64_t, void*>>;

// Runs a plan of graph `g` on the handle's stream with a call's buffers and `workspace` (the
// plan's bytes). The variant pack holds the buffers of g's tensors (the call may name more, e.g. a
// mask's fill value that a graph without the mask lacks); it is kept and rebuilt only when a
// pointer changes (the step's buffers do not).
class Runner {
 public:
  explicit Runner(const attn_graph::Graph& g);
  void run(cudnnHandle_t h, const Plan& p, const Pointers& ptrs, void* workspace);

 private:
  std::vector<int64_t> uids_;  // g's non-virtual tensors
  std::optional<Desc> pack_;
  Pointers last_;
  void* last_workspace_ = nullptr;
};

}  // namespace trainer::cudnn_graph
