// position_embedding layer (keras_hub PositionEmbedding, added to its input): a learned [sequence_length, D] table whose first T rows are added to x [T, D].
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/graph/layers/common.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"

namespace trainer {
namespace {

// y[b, t, :] = x[b, t, :] + embeddings[t, :]. keras_hub's PositionEmbedding returns the table's
// rows broadcast to the input's shape, to be added by the model (x + PositionEmbedding(L)(x)); this
// layer adds them itself. The rows are an embedding lookup of the positions 0 .. T-1 (the embedding
// op, on every backend: its gradient sums each position's rows over the batch in a fixed order);
// dx = dy.
class PositionEmbedding final : public Layer {
 public:
  TRAINER_LAYER_CLONE(PositionEmbedding)
  bool output_reusable() const override { return true; }  // backward reads neither x nor y
  explicit PositionEmbedding(cfg::MapReader& r) {
    length_ = r.get_int("sequence_length", int64_t(0), 0, int64_t(1) << 24);
    init_ = read_initializer(r, "initializer", "glorot_uniform");
  }
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 2 || in[0].numel() == 0)
      spec().fail(fmt::format("position_embedding '{}' takes sequences [time, features], got {}", name(), in[0].str()));
    T_ = in[0][0];
    p_.output_dim = in[0][1];
    if (length_ == 0) length_ = T_;
    if (length_ < T_)
      spec().fail(fmt::format("position_embedding '{}': sequence_length {} is shorter than its input's {} positions",
                              name(), length_, T_));
    p_.input_dim = length_;
    return in[0];
  }
  std::vector<ParamSpec> params() const override {
    return {{"embeddings", Shape{length_, p_.output_dim}, init_, true, length_, p_.output_dim}};
  }
  int64_t flops() const override { return T_ * p_.output_dim; }  // the additions
  LayerConfig describe() const override { return LayerConfig().put_int("sequence_length", length_); }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<EmbeddingKernel>(ctx, p_);
    sum_ = make_kernel<ElementwiseKernel>(ctx, {});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    Tensor& rows = rows_.at(ctx(), x[0]->shape());
    k_->forward(positions(x[0]->dim(0)), params_[0], rows, EmbeddingKernel::Check::Trusted);  // 0 .. T-1
    sum_->add({x[0], &rows}, y);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    k_->backward(positions(x[0]->dim(0)), dy, grads_[0]);
    if (dx[0]->defined()) ctx().copy(dx[0]->data(), dy.data(), dy.bytes());
  }

 private:
  // The ids 0 .. T-1 of each of B samples, as the embedding op takes them (floats [B, T]). They are
  // copied from the host only when B exceeds the samples written so far: a smaller batch (an
  // epoch's last) is a prefix of them, so a recorded step never meets a host copy.
  Tensor positions(int64_t B) {
    if (!ids_.get().defined() || B > written_) {
      written_ = std::max<int64_t>(B, 1);
      std::vector<float> ids(size_t(written_ * T_));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = float(int64_t(i) % T_);
      Tensor& t = ids_.at(ctx(), Shape{written_, T_});
      ctx().copy_from_host(t.data(), ids.data(), ids.size() * sizeof(float));
    }
    return Tensor::view(ids_.get().data(), Shape{B, T_}, DType::F32, ids_.get().device());
  }

  EmbeddingParams p_;
  int64_t length_ = 0, T_ = 0;
  Initializer init_ = InitKind::GlorotUniform;
  KernelSlot<EmbeddingKernel> k_;
  KernelSlot<ElementwiseKernel> sum_;
  HeldTensor rows_, ids_;
  int64_t written_ = 0;  // samples of ids_ holding their positions (ids_ undefined: none)
};

RegisterLayer<PositionEmbedding> reg("position_embedding", "PositionEmbedding");

}  // namespace
}  // namespace trainer
