// multi_head_attention layer (Keras MultiHeadAttention): query/key/value projections, scaled dot-product attention per head (causal or not), the output projection.
#include <fmt/format.h>

#include <cmath>

#include "core/graph/layers/common.h"
#include "core/ops/attention.h"
#include "core/ops/dense.h"
#include "core/ops/elementwise.h"

namespace trainer {
namespace {

// Keras MultiHeadAttention(num_heads, key_dim, value_dim, use_bias) called as attn(query, value)
// with key = value: `inputs: [x]` is self-attention, `inputs: [q, kv]` attends from q to kv.
// Weights as Keras stores them: query/kernel [dq, H, Dk], key/kernel [dkv, H, Dk], value/kernel
// [dkv, H, Dv], attention_output/kernel [H, Dv, dq], biases [H, D] and [dq]; the output has the
// query's width. `causal: true` is Keras's use_causal_mask; `dropout` drops attention
// probabilities in training, its mask a pure function of the step's seed and the layer
// (attention_math.h), redrawn in backward. Under bf16/fp16 the layer computes in the low type (as
// dense does): its inputs, output, projections and the held q, k, v, o are low, the weights and
// the attention's log-sum-exp f32 (scores and probabilities are f32 inside the kernel).
class MultiHeadAttention final : public Layer {
 public:
  TRAINER_LAYER_CLONE(MultiHeadAttention)
  int min_inputs() const override { return 1; }
  int max_inputs() const override { return 2; }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  bool output_reusable() const override { return true; }  // backward reads its held activations, not y
  explicit MultiHeadAttention(cfg::MapReader& r) {
    a_.heads = r.get_int("num_heads", std::nullopt, 1, 1 << 12);
    a_.key_dim = r.get_int("key_dim", std::nullopt, 1, 1 << 16);
    a_.value_dim = r.get_int("value_dim", a_.key_dim, 1, 1 << 16);
    a_.causal = r.get<bool>("causal", false);
    bias_ = r.get<bool>("use_bias", true);
    init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    // trainer's own key (Keras's layer has one kernel_initializer for all four): the output
    // projection's, e.g. GPT-2's residual projections at 0.02/sqrt(2·layers); kernel_initializer's by default.
    output_init_ = r.has("output_kernel_initializer") ? read_initializer(r, "output_kernel_initializer", "zeros") : init_;
    // Keras's dropout: on the attention probabilities, in training only (inverted: kept ones scaled by 1/(1-rate)).
    a_.dropout = float(r.get_float("dropout", 0.0, 0.0, 1.0));
    if (a_.dropout >= 1.0f)
      r.optional("dropout").fail("multi_head_attention: dropout must be below 1 (1 would drop every attention weight)");
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& q = in[0];
    const Shape& kv = in.size() > 1 ? in[1] : in[0];
    for (const Shape* s : {&q, &kv})
      if (s->rank() != 2 || s->numel() == 0)
        spec().fail(fmt::format("multi_head_attention '{}' takes sequences [time, features], got {}", name(), s->str()));
    T_ = q[0], dq_ = q[1], S_ = kv[0], dkv_ = kv[1];
    return q;
  }
  std::vector<ParamSpec> params() const override {
    const int64_t H = a_.heads, Dk = a_.key_dim, Dv = a_.value_dim;
    // Keras's fans of a kernel of rank 3: fan_in = shape[-2]·shape[0], fan_out = shape[-1]·shape[0].
    auto kernel = [&](const char* n, int64_t a, int64_t b, int64_t c, const Initializer& init) {
      return ParamSpec{n, Shape{a, b, c}, init, true, b * a, c * a};
    };
    std::vector<ParamSpec> ps;
    auto add = [&](ParamSpec k, const char* bias_name, Shape bias_shape) {
      ps.push_back(std::move(k));
      if (bias_) ps.push_back({bias_name, std::move(bias_shape), bias_init_, true});
    };
    add(kernel("query/kernel", dq_, H, Dk, init_), "query/bias", Shape{H, Dk});
    add(kernel("key/kernel", dkv_, H, Dk, init_), "key/bias", Shape{H, Dk});
    add(kernel("value/kernel", dkv_, H, Dv, init_), "value/bias", Shape{H, Dv});
    add(kernel("attention_output/kernel", H, Dv, dq_, output_init_), "attention_output/bias", Shape{dq_});
    return ps;
  }
  int64_t flops() const override {
    const int64_t H = a_.heads, Dk = a_.key_dim, Dv = a_.value_dim;
    const int64_t pairs = a_.causal ? T_ * (T_ + 1) / 2 : T_ * S_;  // (query, key) pairs scored
    return 2 * (T_ * dq_ * H * Dk + S_ * dkv_ * H * (Dk + Dv) + pairs * H * (Dk + Dv) + T_ * H * Dv * dq_);
  }
  LayerConfig describe() const override {
    return LayerConfig()
        .put_int("num_heads", a_.heads)
        .put_int("key_dim", a_.key_dim)
        .put_int("value_dim", a_.value_dim)
        .put_int("causal", a_.causal)
        .put_real("dropout", a_.dropout)
        .put_int("use_bias", bias_);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    const int64_t H = a_.heads;
    proj_[0] = make_kernel<DenseKernel>(ctx, DenseParams{H * a_.key_dim, bias_});
    proj_[1] = make_kernel<DenseKernel>(ctx, DenseParams{H * a_.key_dim, bias_});
    proj_[2] = make_kernel<DenseKernel>(ctx, DenseParams{H * a_.value_dim, bias_});
    proj_[3] = make_kernel<DenseKernel>(ctx, DenseParams{dq_, bias_});
    attn_ = make_kernel<AttentionKernel>(ctx, a_);
    sum_ = make_kernel<ElementwiseKernel>(ctx, {});
  }

  void set_step_seed(uint64_t seed) override { seed_ = seed; }
  void set_step_scalars(const StepScalars* step, uint64_t node) override {
    step_ = step;
    node_ = node;
  }

  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    const Tensor& xq = *x[0];
    const Tensor& xkv = *x[x.size() > 1 ? 1 : 0];
    const int64_t B = xq.dim(0), H = a_.heads;
    const DType t = xq.dtype();
    Tensor& q = held_[kQ].at(ctx(), {B, T_, H * a_.key_dim}, t);
    Tensor& k = held_[kK].at(ctx(), {B, S_, H * a_.key_dim}, t);
    Tensor& v = held_[kV].at(ctx(), {B, S_, H * a_.value_dim}, t);
    Tensor& o = held_[kO].at(ctx(), {B, T_, H * a_.value_dim}, t);
    Tensor& lse = held_[kLse].at(ctx(), {B, H, T_});
    proj_[0]->forward(xq, weight(params_, 0), bias(params_, 0), q);
    proj_[1]->forward(xkv, weight(params_, 1), bias(params_, 1), k);
    proj_[2]->forward(xkv, weight(params_, 2), bias(params_, 2), v);
    dropping_ = training && a_.dropout > 0.0f;
    drop_ = step_ ? DropoutSeed{node_, step_} : DropoutSeed{seed_, nullptr};
    attn_->forward(q, k, v, o, lse, dropping_ ? &drop_ : nullptr);
    proj_[3]->forward(o, weight(params_, 3), bias(params_, 3), y);
  }

  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    const Tensor& xq = *x[0];
    const bool self = x.size() == 1;
    const Tensor& xkv = *x[self ? 0 : 1];
    Tensor &q = held_[kQ].get(), &k = held_[kK].get(), &v = held_[kV].get(), &o = held_[kO].get();
    const DType t = xq.dtype();
    Tensor go = temp("multi_head_attention/do", o.shape(), t);
    project_back(3, o, dy, go);
    Tensor gq = temp("multi_head_attention/dq", q.shape(), t);
    Tensor gk = temp("multi_head_attention/dk", k.shape(), t);
    Tensor gv = temp("multi_head_attention/dv", v.shape(), t);
    attn_->backward(q, k, v, o, held_[kLse].get(), go, gq, gk, gv, dropping_ ? &drop_ : nullptr);
    // The key's and the value's input gradients go to the key/value input (the query's for
    // self-attention), added to the query's there.
    Tensor& dkv = *dx[self ? 0 : 1];
    const bool need_kv = dkv.defined();
    Tensor none_q = Tensor::view(nullptr, xq.shape(), t, xq.device());
    Tensor none_kv = Tensor::view(nullptr, xkv.shape(), t, xkv.device());
    Tensor from_k = need_kv ? temp("multi_head_attention/dx from k", xkv.shape(), t) : none_kv;
    Tensor from_v = need_kv ? temp("multi_head_attention/dx from v", xkv.shape(), t) : none_kv;
    project_back(0, xq, gq, dx[0]->defined() ? *dx[0] : none_q);
    project_back(1, xkv, gk, from_k);
    project_back(2, xkv, gv, from_v);
    if (!need_kv) return;
    if (self) sum_->add({&dkv, &from_k, &from_v}, dkv);
    else sum_->add({&from_k, &from_v}, dkv);
  }

 private:
  enum { kQ, kK, kV, kO, kLse, kHeld };  // forward's, read by backward

  // Backward's temporaries: the executor's buffers of these names, shared by its attention layers.
  Tensor temp(std::string_view slot, const Shape& s, DType t) {
    return Tensor::view(transient(slot).get(ctx(), size_t(s.numel()) * dtype_size(t)), s, t, ctx().device());
  }

  // Projection p's kernel as the dense op's [in, units] (a view of the Keras-shaped parameter, or
  // of its gradient), and its bias [units] (undefined without use_bias).
  Tensor weight(const std::vector<Tensor>& t, int p) const {
    const Tensor& w = t[size_t(bias_ ? 2 * p : p)];
    const int64_t in = p == 3 ? a_.heads * a_.value_dim : w.dim(0);
    return Tensor::view(w.data(), {in, w.numel() / in}, DType::F32, w.device());
  }
  // Projection p's backward: its parameters' gradients, and dx (undefined: not needed).
  void project_back(int p, const Tensor& x, const Tensor& dy, Tensor& dx) {
    Tensor dw = weight(grads_, p), db = bias(grads_, p);
    proj_[size_t(p)]->backward(x, weight(params_, p), dy, dx, dw, db);
  }
  Tensor bias(const std::vector<Tensor>& t, int p) const {
    if (!bias_) return Tensor();
    const Tensor& b = t[size_t(2 * p + 1)];
    return Tensor::view(b.data(), {b.numel()}, DType::F32, b.device());
  }

  AttentionParams a_;
  uint64_t seed_ = 0;                  // the step's seed for this layer (set_step_seed)
  const StepScalars* step_ = nullptr;  // a recorded step's seed source (set_step_scalars)
  uint64_t node_ = 0;
  bool dropping_ = false;              // forward ran in training with dropout: backward redraws its mask
  DropoutSeed drop_;
  bool bias_ = true;
  Initializer init_ = InitKind::GlorotUniform, bias_init_, output_init_ = InitKind::GlorotUniform;
  int64_t T_ = 0, S_ = 0, dq_ = 0, dkv_ = 0;
  KernelSlot<DenseKernel> proj_[4];  // query, key, value, output
  KernelSlot<AttentionKernel> attn_;
  KernelSlot<ElementwiseKernel> sum_;
  HeldTensor held_[kHeld];
};

RegisterLayer<MultiHeadAttention> reg("multi_head_attention", "MultiHeadAttention");

}  // namespace
}  // namespace trainer
