// Layer: one node of the static graph — reads its config, infers its shape, declares its
// parameters, and runs forward/backward through the op kernels of its replica's device.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/graph/initializer.h"
#include "core/io/config.h"
#include "core/ops/activation.h"
#include "core/ops/context.h"
#include "core/ops/step_scalars.h"

namespace trainer {

// Scratch buffers by slot name: an executor's pool serves every layer it runs (Layer::transient).
class ScratchPool {
 public:
  Scratch& at(std::string_view slot) {
    auto it = slots_.find(slot);
    if (it == slots_.end()) it = slots_.emplace(std::string(slot), Scratch()).first;
    return it->second;
  }
  size_t bytes() const {
    size_t b = 0;
    for (const auto& [slot, s] : slots_) b += s.bytes();
    return b;
  }

 private:
  std::map<std::string, Scratch, std::less<>> slots_;  // nodes stay put: references stay valid
};

struct ParamSpec {
  std::string name;  // "kernel", "bias", "gamma", "moving_mean", ...
  Shape shape;
  Initializer init = InitKind::Zeros;
  bool trainable = true;
  // For the variance-scaling initialisers; 0: Keras's compute_fans of the shape (keras_fans).
  int64_t fan_in = 0, fan_out = 0;
  // Another layer's parameter this one uses as its own (a dense layer's `tie:`: "tokens/embeddings"),
  // of the same shape, held once; its gradient is this layer's added to the owner's. "" for a
  // parameter of its own.
  std::string tied_to = {};
};

// What a layer computes in under mixed precision (bf16 or fp16; under fp32 everything is fp32).
// Its output and output gradient have that type; inputs of the other type are converted (the
// ExecutionPlan plans it, the Executor does it). "Low" is the precision's type: bf16 or f16.
//   F32: always fp32 (the default: softmax, LSTM, layer norm, attention, ...).
//   Follow: low when every input is low, else fp32: memory-bound layers whose kernels take
//     either type (batch norm, activations, pooling, concat, add, padding, flatten), so a chain of
//     them after a convolution moves half the bytes and stores half the activation memory.
//   Low: always low: compute-bound layers with low-precision kernels (convolutions, depthwise,
//     dense; the logits' dense stays f32 all the same: the engine keeps the loss's input f32).
enum class MixedPrecision { F32, Follow, Low };

// Statistics over every data-parallel replica (batch norm with sync_bn): the narrow view of the
// replicas' communicator a layer gets. In-place sum over the replicas of a few f32 values on the
// layer's device, in the device's order (issued on its stream, as the step's recorded collectives
// are: no host wait, so a step that sums statistics can still be one recorded program).
class StatsSync {
 public:
  virtual ~StatsSync() = default;
  virtual int replicas() const = 0;
  virtual void all_reduce_sum(Tensor& values) = 0;
};

// A layer's kernel, made at bind(). A copy of the layer (Layer::clone, made before bind) copies
// its configuration, not its kernel.
template <class K>
class KernelSlot {
 public:
  KernelSlot() = default;
  KernelSlot(const KernelSlot&) {}
  KernelSlot& operator=(const KernelSlot&) {
    p_.reset();
    return *this;
  }
  KernelSlot& operator=(std::unique_ptr<K> k) {
    p_ = std::move(k);
    return *this;
  }
  K* operator->() const { return p_.get(); }
  K& operator*() const { return *p_; }
  explicit operator bool() const { return bool(p_); }

 private:
  std::unique_ptr<K> p_;
};

// A layer's configuration as plain named values (Layer::describe): what a tool that translates
// the model into another format reads (the ONNX exporter, core/export) instead of its YAML.
// Keys are the layer's config keys where it has one value ("filters", "units", "padding": "same"),
// split where a key holds a pair ("kernel" -> "kernel_h", "kernel_w"); flags are integers 0/1.
class LayerConfig {
 public:
  LayerConfig& put_int(const std::string& key, int64_t v);
  LayerConfig& put_real(const std::string& key, double v);
  LayerConfig& put_text(const std::string& key, std::string v);
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  // std::logic_error naming the key when it is absent or of another kind (a describe() missing
  // a key is a bug of the layer or of its reader).
  int64_t integer(const std::string& key) const;
  double real(const std::string& key) const;
  const std::string& text(const std::string& key) const;
  bool flag(const std::string& key) const { return integer(key) != 0; }

 private:
  std::map<std::string, std::variant<int64_t, double, std::string>> values_;
};

class Layer {
 public:
  virtual ~Layer() = default;
  // A fresh copy of this layer's configuration and inferred shapes, not bound to any device: a
  // Graph's layers are prototypes, each executor binds clones of its own.
  virtual std::unique_ptr<Layer> clone() const = 0;

  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  const cfg::Node& spec() const { return spec_; }  // for messages at the layer's location
  void set_identity(std::string name, std::string type, cfg::Node spec) {
    name_ = std::move(name);
    type_ = std::move(type);
    spec_ = std::move(spec);
  }

  // How many inputs the layer takes (max -1: any number).
  virtual int min_inputs() const { return 1; }
  virtual int max_inputs() const { return 1; }
  // Output shape (without batch) from input shapes (without batch); a shape that cannot work
  // is reported with spec().fail(...).
  virtual Shape infer(const std::vector<Shape>& inputs) = 0;
  // Parameters, after infer().
  virtual std::vector<ParamSpec> params() const { return {}; }
  // Forward multiply-adds x2 per sample, after infer().
  virtual int64_t flops() const { return 0; }
  // The configuration as plain values (LayerConfig), after infer(); empty for a layer without one.
  virtual LayerConfig describe() const { return {}; }

  // Runtime, once per replica: receive the context and views of this layer's parameters and
  // gradients (in the order of params(); gradients only for trainable ones).
  virtual void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) {
    ctx_ = &ctx;
    params_ = std::move(params);
    grads_ = std::move(grads);
  }
  // x: inputs [N, ...]; y: preallocated output [N, ...] (a layer may instead make y a view of x).
  virtual void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) = 0;
  // dx[i] is overwritten with the gradient for input i, or undefined when not needed; parameter
  // gradients are overwritten in the views given to bind().
  virtual void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                        const std::vector<Tensor*>& dx) = 0;
  // In-place execution (Caffe's in-place ReLU). A layer that says in_place() may be given an
  // output that is its single input's buffer: forward then overwrites its input, and its backward
  // must read only y and dy (never x). The graph does this only when the input's producer says
  // output_reusable() — its backward never reads its own output, and the output is a buffer of its
  // own, not a view of its input — and nothing else reads that output.
  virtual bool in_place() const { return false; }
  virtual bool output_reusable() const { return false; }
  // An identity (its output is its input, unchanged; backward passes dy): it may run in place over
  // any producer's output, which it never changes (a zero_pad2d folded into its reader).
  virtual bool identity() const { return false; }
  // Padding folded into the window that reads it (Graph, the pad_fold fast path): a layer that
  // only adds zeros around its input says how many (top, bottom, left, right); its one reader
  // absorb_padding()s them into its windows where it can (true: its infer() then takes the
  // unpadded input), and the layer becomes an identity by fold_padding(reader).
  virtual std::optional<std::array<int, 4>> padding_to_fold() const { return std::nullopt; }
  virtual bool absorb_padding(const std::array<int, 4>& /*top_bottom_left_right*/) { return false; }
  virtual void fold_padding(const std::string& /*reader*/) {}
  virtual MixedPrecision mixed_precision() const { return MixedPrecision::F32; }
  // Fusion (planned by the ExecutionPlan, applied by the Executor): an activation running in
  // place over its producer's output may be applied by the producer in its own pass (batch norm +
  // ReLU, forward and backward). activation(): the kind an activation layer applies (else none).
  // fuse_activation(k): from now on the producer applies k (none: it stops), or says false when it
  // cannot. set_fused(true): the producer does this activation layer's work, so its forward and
  // backward do nothing (its output and gradient are the producer's buffers, see in_place()).
  virtual std::optional<ActKind> activation() const { return std::nullopt; }
  // Whether fuse_activation(k) would succeed now (after bind): what an execution plan asks.
  virtual bool can_fuse_activation(ActKind) const { return false; }
  virtual bool fuse_activation(std::optional<ActKind> k) { return !k; }
  virtual void set_fused(bool) {}
  // Channel slices (planned by the ExecutionPlan, made by the Executor): the inputs of a layer
  // that joins_channels() (concat) may be written in its output by their producers, and their
  // gradients read from its gradient, instead of copied. A producer that does so says
  // writes_channel_slice() (after bind): its forward takes y, and its backward y and dy, as
  // strided views (Tensor::row_stride); the concat leaves an input already in place alone.
  virtual bool writes_channel_slice() const { return false; }
  virtual bool joins_channels() const { return false; }
  // Input gradients added in place: a layer that can_add_input_grad(k) (after bind) adds its
  // gradient for input k into dx[k] instead of overwriting it while add_input_grad(k, true) is set.
  // The executor sets it for a tensor's second consumer in backward, which then adds into the
  // gradient the first wrote, instead of writing a scratch buffer summed afterwards.
  virtual bool can_add_input_grad(int /*k*/) const { return false; }
  virtual void add_input_grad(int /*k*/, bool /*on*/) {}
  // Input gradients of another type: a layer that writes_input_grad_as(k, t) (after bind) writes
  // its gradient for input k directly in type t when the executor hands it a gradient of that
  // type (the input's, not this node's), rounding as the executor's separate conversion would;
  // otherwise the executor converts a copy in this node's type afterwards.
  virtual bool writes_input_grad_as(int /*k*/, DType /*t*/) const { return false; }
  // The same for forward's inputs: a layer that reads_input_as(t) (after bind) takes an input of
  // type t as it is where its node's type is wider (a bf16 input of an f32 node), computing as it
  // would on the converted copy (that widening is exact); otherwise the executor hands it a copy
  // converted to its node's type.
  virtual bool reads_input_as(DType /*t*/) const { return false; }
  // Gradient pass-through: a layer whose backward writes input k's gradient as its output gradient
  // itself, unchanged (add), and leaves it alone where the two are one buffer. The plan may then
  // give that input's gradient the output gradient's buffer (ExecutionPlan::grad_over): no copy.
  virtual bool passes_grad_through(int /*k*/) const { return false; }
  // Sibling groups (ExecutionPlan::sibling_leader): layers whose outputs fill a concat's channels,
  // one after another, whose forward and backward the group's last in forward order runs for all
  // of them in one pass over the concat's rows (the others' are then skipped). joins_siblings():
  // whether this layer can (after bind). The members come in channel order, this one among them,
  // each with its input (and in backward its input gradient, overwritten; undefined: not needed);
  // y and dy: the concat's output and gradient.
  virtual bool joins_siblings() const { return false; }
  virtual void forward_siblings(const std::vector<Layer*>& /*members*/, const std::vector<const Tensor*>& /*x*/,
                                Tensor& /*y*/, bool /*training*/) {
    throw std::logic_error("forward_siblings on a layer that does not join siblings");
  }
  virtual void backward_siblings(const std::vector<Layer*>& /*members*/, const std::vector<const Tensor*>& /*x*/,
                                 const Tensor& /*y*/, const Tensor& /*dy*/, const std::vector<Tensor*>& /*dx*/) {
    throw std::logic_error("backward_siblings on a layer that does not join siblings");
  }
  // Layers with run-to-run randomness (dropout) get a fresh seed each step.
  virtual void set_step_seed(uint64_t) {}
  // A recorded step (CUDA graphs): the step's seed is read from `step` where the kernels run, and
  // this layer's is node_seed(that, node); null returns to set_step_seed's value.
  virtual void set_step_scalars(const StepScalars* /*step*/, uint64_t /*node*/) {}
  // Data parallelism with sync_bn: layers whose statistics span the batch (batch norm) reduce
  // them over every replica through `sync` (used on the worker thread only).
  virtual void set_sync(StatsSync*) {}
  // The pool transient() draws from: the executor's, set before bind (its layers run one at a time
  // on one context).
  void set_scratch_pool(ScratchPool* pool) { pool_ = pool; }

 protected:
  OpContext& ctx() const { return *ctx_; }
  // Memory a layer needs only inside one forward or backward call, and that nothing it calls uses
  // (a layer's own gradient temporaries): one buffer per slot name shared by every layer of the
  // executor instead of one per layer (GPT-2's 12 attention layers keep one set of their six
  // backward temporaries, not twelve). Grow-only, as Scratch. Without an executor's pool (a layer
  // run alone) the layer's own.
  Scratch& transient(std::string_view slot) { return (pool_ ? *pool_ : own_.pool).at(slot); }
  OpContext* ctx_ = nullptr;
  std::vector<Tensor> params_, grads_;

 private:
  // A layer's own pool; a copy (clone) starts empty.
  struct OwnPool {
    ScratchPool pool;
    OwnPool() = default;
    OwnPool(const OwnPool&) {}
    OwnPool& operator=(const OwnPool&) { return *this; }
  };
  std::string name_, type_;
  cfg::Node spec_;
  ScratchPool* pool_ = nullptr;
  OwnPool own_;
};

// The clone() of a layer class whose copy constructor copies its configuration.
#define TRAINER_LAYER_CLONE(Class) \
  std::unique_ptr<Layer> clone() const override { return std::make_unique<Class>(*this); }

// Layer types by config name. A factory reads the layer's own keys from the reader (name, type
// and inputs are read by the graph builder).
using LayerFactory = std::function<std::unique_ptr<Layer>(cfg::MapReader& spec)>;
struct LayerInfo {
  std::string keras_name;  // for the summary: "Conv2D"
  LayerFactory make;
  // Takes Keras's `activation:` key (Dense, Conv2D, DepthwiseConv2D): parse_model puts an
  // activation layer after it (core/graph/model_spec.cpp).
  bool takes_activation = false;
};
void register_layer(const std::string& type, LayerInfo info);
const LayerInfo* find_layer(const std::string& type);
std::vector<std::string> layer_types();

enum class ActivationKey { No, Yes };  // RegisterLayer's: does the type take `activation:`

template <class L>
struct RegisterLayer {
  RegisterLayer(const char* type, const char* keras_name, ActivationKey act = ActivationKey::No) {
    register_layer(type, {keras_name, [](cfg::MapReader& r) { return std::unique_ptr<Layer>(std::make_unique<L>(r)); },
                          act == ActivationKey::Yes});
  }
};

}  // namespace trainer
