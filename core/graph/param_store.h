// ParamStore: every parameter of a replica in one flat device buffer (trainable first), with
// the trainable gradients in a second flat buffer; layers hold views into both.
#pragma once
#include <string>
#include <vector>

#include "core/graph/layer.h"

namespace trainer {

struct ParamEntry {
  std::string name;  // "conv1/conv/kernel"
  ParamSpec spec;
  int64_t offset = 0;  // in floats, into weights (and, when trainable, grads)
};

// Where each parameter lives in the flat buffers: trainable ones first (so the gradient buffer
// mirrors that prefix), each aligned to 16 floats. Part of the immutable Graph.
class ParamLayout {
 public:
  ParamLayout() = default;
  explicit ParamLayout(std::vector<ParamEntry> entries);
  const std::vector<ParamEntry>& entries() const { return entries_; }
  int64_t trainable_floats() const { return trainable_floats_; }  // also the gradient buffer's length
  int64_t total_floats() const { return total_floats_; }
  int64_t count(bool trainable) const;  // parameter values, without alignment padding

 private:
  std::vector<ParamEntry> entries_;
  int64_t trainable_floats_ = 0, total_floats_ = 0;
};

// One copy's parameters in memory: the weights in one flat buffer on a device, the trainable
// gradients in a second; layers hold views into both.
class ParamStore {
 public:
  // Allocates the buffers on the context's device and fills the weights with their initialisers
  // (computed on the host from `seed` and each parameter's name, then uploaded).
  ParamStore(const ParamLayout& layout, OpContext& ctx, uint64_t seed);

  const ParamLayout& layout() const { return layout_; }
  const std::vector<ParamEntry>& entries() const { return layout_.entries(); }
  int64_t trainable_floats() const { return layout_.trainable_floats(); }
  int64_t total_floats() const { return layout_.total_floats(); }
  int64_t count(bool trainable) const { return layout_.count(trainable); }
  Tensor& weights() { return weights_; }
  Tensor& grads() { return grads_; }
  // The trainable prefix of the weights, as long as grads().
  Tensor trainable_weights() const;
  Tensor trainable_grads() const;  // grads() without its padding: as long as trainable_weights()
  // The parameters that are not trained (batch-norm running statistics): what data-parallel
  // replicas copy from rank 0 to stay identical.
  Tensor frozen_weights() const;
  Tensor weight_view(size_t i) const;
  Tensor grad_view(size_t i) const;  // undefined for non-trainable parameters

  // Host copies of the parameter values (tests, checkpoints).
  std::vector<float> download(OpContext& ctx) const;
  void upload(OpContext& ctx, const std::vector<float>& values);

 private:
  ParamLayout layout_;
  Tensor weights_, grads_;
};

// Fills `out` with `spec`'s initial values (Keras initialisers), deterministic in (seed, name).
void init_param(const ParamSpec& spec, const std::string& name, uint64_t seed, float* out);

}  // namespace trainer
