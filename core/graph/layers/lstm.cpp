// lstm layer (Keras LSTM): units, return_sequences, use_bias, unit_forget_bias on a (steps, features) input.
#include "core/graph/layers/recurrent.h"
#include "core/ops/lstm.h"

namespace trainer {
namespace {

class Lstm final : public RecurrentLayer<LstmKernel> {
 public:
  TRAINER_LAYER_CLONE(Lstm)
  explicit Lstm(cfg::MapReader& r) : RecurrentLayer(r, 4) {
    unit_forget_bias_ = r.get<bool>("unit_forget_bias", true);
    bias_init_.forget_gate_ones = unit_forget_bias_;  // the forget gate's quarter of the bias at 1
  }
  // Per step: the input and recurrent products (2·4U·(F + U)), the bias (4U), the gate
  // activations (4U) and the cell and output updates (5U).
  int64_t flops() const override {
    const int64_t U = p_.units;
    return steps_ * (8 * U * (features_ + U) + 13 * U);
  }
  // Keras' defaults, the only ones the layer has: activation tanh, recurrent_activation sigmoid.
  LayerConfig describe() const override {
    return describe_common().put_text("activation", "tanh").put_text("recurrent_activation", "sigmoid");
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = bias_grad();
    k_->backward(*x[0], params_[0], params_[1], y, dy, *dx[0], grads_[0], grads_[1], db);
  }

 private:
  bool unit_forget_bias_ = true;
};

RegisterLayer<Lstm> reg("lstm", "LSTM");

}  // namespace
}  // namespace trainer
