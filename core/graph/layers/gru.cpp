// gru layer (Keras GRU, reset_after): units, return_sequences, use_bias on a (steps, features) input.
#include "core/graph/layers/recurrent.h"
#include "core/ops/gru.h"

namespace trainer {
namespace {

class Gru final : public RecurrentLayer<GruKernel> {
 public:
  TRAINER_LAYER_CLONE(Gru)
  explicit Gru(cfg::MapReader& r) : RecurrentLayer(r, 3) {
    // Keras 3's default (and TensorFlow 2's, cuDNN's): the reset gate applied after the recurrent
    // projection. reset_after: false (Keras 1's form, one bias row) is not here.
    if (!r.get<bool>("reset_after", true))
      r.required("reset_after").fail("gru: only reset_after: true (Keras's default) is implemented");
  }
  // Per step: the input and recurrent products (2·3U·(F + U)), the biases (6U), the gates (3U) and
  // the updates (~6U).
  int64_t flops() const override {
    const int64_t U = p_.units;
    return steps_ * (6 * U * (features_ + U) + 15 * U);
  }
  LayerConfig describe() const override {
    return describe_common()
        .put_int("reset_after", 1)
        .put_text("activation", "tanh")
        .put_text("recurrent_activation", "sigmoid");
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = bias_grad();
    k_->backward(*x[0], params_[0], params_[1], dy, *dx[0], grads_[0], grads_[1], db);
  }

 protected:
  // Keras's bias [2, 3U]: the input row, then the recurrent one; columns [z | r | h].
  Shape bias_shape() const override { return Shape{2, 3 * p_.units}; }
};

RegisterLayer<Gru> reg("gru", "GRU");

}  // namespace
}  // namespace trainer
