// dense layer (Keras Dense) over the last axis: a flat input, or each position of a sequence [time, features].
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/dense.h"
#include "core/ops/elementwise.h"

namespace trainer {
namespace {

// `tie: tokens` (GPT-2's and keras_hub's ReversibleEmbedding's tied output projection): the kernel
// is that embedding layer's table [input_dim, output_dim] read transposed, held once; `units` must be
// the embedding's input_dim and the input's width its output_dim. The layer transposes the table
// into a buffer of its own before the product (and the product's kernel gradient back into the
// table's layout), so the dense kernels are the untied ones; the gradient is added to the
// embedding's own after that layer's backward (Executor::finish_params).
class Dense final : public KernelBiasLayer<DenseKernel> {
 public:
  TRAINER_LAYER_CLONE(Dense)
  explicit Dense(cfg::MapReader& r) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 24);
    p_.bias = r.get<bool>("use_bias", true);
    init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    if (r.has("tie")) tie_ = r.get<std::string>("tie");
    if (!tie_.empty() && r.has("kernel_initializer"))
      r.optional("kernel_initializer")
          .fail(fmt::format("a dense layer with tie: {0} has {0}'s table as its kernel, drawn by {0}'s "
                            "embeddings_initializer: remove this kernel_initializer",
                            tie_));
  }
  // [features] -> [units]; a sequence [time, features] -> [time, units], the same kernel at every
  // position (Keras). An image is refused (Keras would apply it to each pixel: here that is a 1x1
  // conv2d; forgetting the flatten is the usual cause).
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 1 && in[0].rank() != 2)
      spec().fail(fmt::format("dense '{}' needs a flat input or a sequence [time, features], got {}; put a flatten "
                              "or global_avg_pool2d layer before it",
                              name(), in[0].str()));
    k_in_ = in[0].back();
    positions_ = in[0].numel() / k_in_;
    return dense_output_shape(in[0], p_);
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps;
    if (tie_.empty())
      ps.push_back({"kernel", Shape{k_in_, p_.units}, init_, true, k_in_, p_.units});
    else
      ps.push_back({"kernel", Shape{p_.units, k_in_}, init_, true, k_in_, p_.units, tie_ + "/embeddings"});
    if (p_.bias) ps.push_back({"bias", Shape{p_.units}, bias_init_, true});
    return ps;
  }
  int64_t flops() const override { return 2 * positions_ * k_in_ * p_.units; }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  LayerConfig describe() const override {
    LayerConfig c = LayerConfig().put_int("units", p_.units).put_int("use_bias", p_.bias);
    if (!tie_.empty()) c.put_text("tie", tie_);
    return c;
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    KernelBiasLayer<DenseKernel>::bind(ctx, std::move(params), std::move(grads));
    if (tie_.empty()) return;
    transpose_ = make_kernel<ElementwiseKernel>(ctx, {});
    kernel_ = ctx.empty({k_in_, p_.units});
    dkernel_ = ctx.empty({k_in_, p_.units});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    if (tie_.empty()) return KernelBiasLayer<DenseKernel>::forward(x, y, training);
    transpose_->transpose(params_[0], kernel_);
    k_->forward(*x[0], kernel_, p_.bias ? params_[1] : Tensor(), y);
  }
  // The kernel buffer still holds this step's transpose (the weights change only between steps).
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (tie_.empty()) return KernelBiasLayer<DenseKernel>::backward(x, y, dy, dx);
    Tensor db = p_.bias ? grads_[1] : Tensor();
    k_->backward(*x[0], kernel_, dy, *dx[0], dkernel_, db);
    transpose_->transpose(dkernel_, grads_[0]);
  }

 private:
  Initializer init_, bias_init_;
  int64_t k_in_ = 0, positions_ = 1;
  std::string tie_;  // the embedding layer whose table is the kernel, transposed ("" untied)
  KernelSlot<ElementwiseKernel> transpose_;
  Tensor kernel_, dkernel_;  // the table transposed [K, units], and the product's kernel gradient
};

RegisterLayer<Dense> reg("dense", "Dense", ActivationKey::Yes);

}  // namespace
}  // namespace trainer
