// Helpers shared by layer implementations: config readers for padding and windows, held activations (initialisers: core/graph/initializer.h).
#pragma once
#include "core/graph/layer.h"
#include "core/ops/window.h"

namespace trainer {

inline Padding read_padding(cfg::MapReader& r, const char* fallback) {
  return r.get_choice("padding", {"same", "valid"}, fallback) == "same" ? Padding::Same : Padding::Valid;
}

// A sliding window's configuration for describe(): kernel (or pool), strides, dilation, padding.
inline LayerConfig& describe_window(LayerConfig& c, const char* kernel, int kh, int kw, int sh, int sw, int dh, int dw,
                                    Padding p) {
  return c.put_int(std::string(kernel) + "_h", kh)
      .put_int(std::string(kernel) + "_w", kw)
      .put_int("strides_h", sh)
      .put_int("strides_w", sw)
      .put_int("dilation_h", dh)
      .put_int("dilation_w", dw)
      .put_text("padding", padding_name(p));
}

// Grow-only memory a layer keeps between its forward and backward (activations of its own ops),
// seen as a tensor of the call's shape and type: allocated when a call needs more, never shrunk, so
// fixed shapes allocate only on the first step. A copy of the layer (made before bind) starts without it.
class HeldTensor {
 public:
  HeldTensor() = default;
  HeldTensor(const HeldTensor&) {}
  HeldTensor& operator=(const HeldTensor&) { return *this; }
  Tensor& at(OpContext& c, const Shape& s, DType t = DType::F32) {
    if (!t_.defined() || t_.shape() != s || t_.dtype() != t)
      t_ = Tensor::view(mem_.get(c, size_t(s.numel()) * dtype_size(t)), s, t, c.device());
    return t_;
  }
  Tensor& get() { return t_; }

 private:
  Scratch mem_;
  Tensor t_;
};

// A layer's random seed for one step (dropout, noise): the executor's per-step seed
// (Layer::set_step_seed), or, in a recorded step, the node's index with the step's memory
// (Layer::set_step_scalars), where the kernel reads the seed when it runs.
class StepSeed {
 public:
  void set(uint64_t seed) { seed_ = seed; }
  void set(const StepScalars* step, uint64_t node) {
    step_ = step;
    node_ = node;
  }
  DropoutSeed get() const { return step_ ? DropoutSeed{node_, step_} : DropoutSeed{seed_, nullptr}; }

 private:
  uint64_t seed_ = 0;
  const StepScalars* step_ = nullptr;
  uint64_t node_ = 0;
};

// A layer whose op takes (input, kernel weights, optional bias) — conv2d and dense share this
// runtime; they differ in config, shapes and parameters.
template <class Kernel>
class KernelBiasLayer : public Layer {
 public:
  bool output_reusable() const override { return true; }  // backward never reads y
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<Kernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    k_->forward(*x[0], params_[0], p_.bias ? params_[1] : Tensor(), y);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[1] : Tensor();
    k_->backward(*x[0], params_[0], dy, *dx[0], grads_[0], db);
  }

 protected:
  typename Kernel::Params p_;
  KernelSlot<Kernel> k_;
};

}  // namespace trainer
