// embedding layer (Keras Embedding): input_dim, output_dim; token ids (held as floats) to vectors.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/embedding.h"

namespace trainer {
namespace {

class Embedding final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Embedding)
  explicit Embedding(cfg::MapReader& r) {
    p_.input_dim = r.get_int("input_dim", std::nullopt, 1, int64_t(1) << 30);
    p_.output_dim = r.get_int("output_dim", std::nullopt, 1, 1 << 20);
    init_ = read_initializer(r, "embeddings_initializer", "uniform");
  }
  // ids (steps) -> (steps, output_dim); any rank, as Keras.
  Shape infer(const std::vector<Shape>& in) override { return embedding::output_shape(in[0], p_); }
  // Keras' embeddings_initializer, by default "uniform": RandomUniform(-0.05, 0.05).
  std::vector<ParamSpec> params() const override {
    return {{"embeddings", Shape{p_.input_dim, p_.output_dim}, init_, true}};
  }
  int64_t flops() const override { return 0; }  // a gather: no arithmetic
  LayerConfig describe() const override {
    return LayerConfig().put_int("input_dim", p_.input_dim).put_int("output_dim", p_.output_dim);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<EmbeddingKernel>(ctx, p_);
  }
  // In a recorded step (step scalars given) the ids are checked where the kernels run, the first
  // bad one noted in the step's sums for the host to report when it reads the step; otherwise now.
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    using Check = EmbeddingKernel::Check;
    k_->forward(*x[0], params_[0], y, sums_ ? Check::Deferred : Check::Now, sums_);
  }
  void set_step_scalars(const StepScalars* step, uint64_t) override { sums_ = step ? step_sums(step) : nullptr; }
  // Ids have no gradient: an input gradient asked for is zero.
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    k_->backward(*x[0], dy, grads_[0]);
    if (dx[0]->defined()) ctx().fill_zero(dx[0]->data(), dx[0]->bytes());
  }

 private:
  EmbeddingParams p_;
  Initializer init_;
  LossSums* sums_ = nullptr;  // the recorded step's, while its scalars are set
  KernelSlot<EmbeddingKernel> k_;
};

RegisterLayer<Embedding> reg("embedding", "Embedding");

}  // namespace
}  // namespace trainer
