// bidirectional layer (Keras Bidirectional): an lstm, gru or simple_rnn run over the steps and a copy with its own weights run over them backwards, the two outputs merged (concat, sum, ave, mul).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/graph/model_spec.h"
#include "core/ops/elementwise.h"
#include "core/ops/multiply.h"

namespace trainer {
namespace {

enum class Merge { Concat, Sum, Ave, Mul };
constexpr const char* kMergeNames[] = {"concat", "sum", "ave", "mul"};

// Keras's definition (keras/src/layers/rnn/bidirectional.py): the forward layer reads x; the
// backward layer (go_backwards) reads x's steps in reverse, and its output sequence is reversed
// back so that step t of both halves belongs to step t of x; the last-state form takes each
// layer's own last step (the backward layer's is x's first). Weights "forward_<layer>/..." and
// "backward_<layer>/..." (<layer>: the wrapped layer's name, its type by default), as Keras names
// them. The halves' outputs, the reversed input and the reversed backward output are kept between
// forward and backward in buffers of the layer's own; the gradients' in transient ones.
class Bidirectional final : public Layer {
 public:
  explicit Bidirectional(cfg::MapReader& r) {
    inner_ = r.required("layer");
    const cfg::Node& inner = inner_;
    if (!inner.is_map()) inner.fail("bidirectional: 'layer' must be the recurrent layer it wraps, e.g. {type: lstm, units: 64}");
    cfg::MapReader ir(inner, "the layer bidirectional wraps");
    inner_type_ = ir.get_choice("type", {"lstm", "gru", "simple_rnn"});
    const cfg::Node name = ir.optional("name");
    inner_name_ = name.defined() ? name.as<std::string>() : inner_type_;
    if (std::string why = name_problem(inner_name_, false); !why.empty())
      name.fail(fmt::format("'{}' is not a valid layer name: {}", inner_name_, why));
    fwd_ = find_layer(inner_type_)->make(ir);
    ir.finish();
    bwd_ = fwd_->clone();
    const cfg::Node mode = r.optional("merge_mode");
    if (r.node().has("merge_mode") && !mode.defined())  // given as null (a defined node is never null)
      mode.fail("bidirectional: merge_mode null (Keras's two separate outputs) is not supported; use concat, sum, ave or mul");
    const std::string m = r.get_choice("merge_mode", {"concat", "sum", "ave", "mul"}, "concat");
    for (int k = 0; k < 4; ++k)
      if (m == kMergeNames[k]) merge_ = Merge(k);
  }
  Bidirectional(const Bidirectional& o)
      : Layer(o), inner_(o.inner_), inner_type_(o.inner_type_), inner_name_(o.inner_name_), merge_(o.merge_), fwd_(o.fwd_->clone()),
        bwd_(o.bwd_->clone()), half_(o.half_), sequences_(o.sequences_), split_(o.split_) {}
  std::unique_ptr<Layer> clone() const override { return std::make_unique<Bidirectional>(*this); }

  Shape infer(const std::vector<Shape>& in) override {
    fwd_->set_identity(name() + "/forward_" + inner_name_, inner_type_, inner_);
    bwd_->set_identity(name() + "/backward_" + inner_name_, inner_type_, inner_);
    half_ = fwd_->infer(in);
    bwd_->infer(in);
    sequences_ = half_.rank() == 2;  // (steps, units): return_sequences
    split_ = int(fwd_->params().size());
    Shape out = half_;
    if (merge_ == Merge::Concat) out[out.rank() - 1] *= 2;
    return out;
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps;
    for (const auto& [layer, prefix] : {std::pair{fwd_.get(), "forward_"}, std::pair{bwd_.get(), "backward_"}})
      for (ParamSpec p : layer->params()) {
        p.name = prefix + inner_name_ + "/" + p.name;
        ps.push_back(std::move(p));
      }
    return ps;
  }
  int64_t flops() const override { return 2 * fwd_->flops() + (merge_ == Merge::Concat ? 0 : half_.numel()); }
  // The wrapped layer's configuration (its keys as it describes them), its type and name, and merge_mode.
  LayerConfig describe() const override {
    const LayerConfig d = fwd_->describe();
    LayerConfig c;
    for (const char* k : {"units", "return_sequences", "use_bias"}) c.put_int(k, d.integer(k));
    for (const char* k : {"activation", "recurrent_activation"})
      if (d.has(k)) c.put_text(k, d.text(k));  // simple_rnn has no gates
    return c.put_text("layer", inner_type_).put_text("layer_name", inner_name_).put_text("merge_mode", kMergeNames[int(merge_)]);
  }
  bool output_reusable() const override { return true; }  // backward reads the halves it keeps, not y

  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, params, grads);
    // Every parameter of a recurrent layer is trainable: the gradients split where the parameters do.
    const auto at = [this](std::vector<Tensor>& v, bool first) {
      return first ? std::vector<Tensor>(v.begin(), v.begin() + split_) : std::vector<Tensor>(v.begin() + split_, v.end());
    };
    fwd_->bind(ctx, at(params, true), at(grads, true));
    bwd_->bind(ctx, at(params, false), at(grads, false));
    ew_ = make_kernel<ElementwiseKernel>(ctx, ElementwiseParams{});
    if (merge_ == Merge::Mul) mul_ = make_kernel<MultiplyKernel>(ctx, MultiplyParams{});
  }

  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    const Tensor& in = *x[0];
    const Shape h = half_.with_batch(in.dim(0));
    Tensor& yf = yf_.at(ctx(), h);
    Tensor& yb = yb_.at(ctx(), h);
    Tensor& xr = xr_.at(ctx(), in.shape());
    fwd_->forward({&in}, yf, training);
    ew_->reverse_steps(in, xr);
    bwd_->forward({&xr}, yb, training);
    const Tensor& b = sequences_ ? reversed(yb) : yb;
    switch (merge_) {
      case Merge::Concat: ew_->concat({&yf, &b}, y); break;
      case Merge::Sum: ew_->add({&yf, &b}, y); break;
      case Merge::Ave:
        ew_->add({&yf, &b}, y);
        ew_->scale(y, 0.5f);  // (a + b) / 2, as Keras: halving is exact
        break;
      case Merge::Mul: {
        Tensor a3 = rows(yf), y3 = rows(y);
        mul_->forward(a3, flat(b), y3);
        break;
      }
    }
  }

  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    const Tensor& in = *x[0];
    const Shape h = half_.with_batch(in.dim(0));
    const Tensor& yf = yf_.get();
    const Tensor& yb = yb_.get();
    // The halves' gradients: dyf for the forward layer, dyb in x's step order for the backward one.
    Tensor dyf = dy, dyb = dy;
    switch (merge_) {
      case Merge::Concat: {
        dyf = buffer("bidirectional/dy_forward", h);
        dyb = buffer("bidirectional/dy_backward", h);
        ew_->split(dy, {&dyf, &dyb});
        break;
      }
      case Merge::Sum: break;
      case Merge::Ave:
        dyf = buffer("bidirectional/dy_forward", h);
        ew_->convert(dy, dyf);
        ew_->scale(dyf, 0.5f);
        dyb = dyf;
        break;
      case Merge::Mul: {
        dyf = buffer("bidirectional/dy_forward", h);
        dyb = buffer("bidirectional/dy_backward", h);
        Tensor a3 = rows(yf), dy3 = rows(dy), da3 = rows(dyf), db2 = flat(dyb);
        mul_->backward(a3, flat(sequences_ ? ybr_.get() : yb), dy3, da3, db2);
        break;
      }
    }
    if (sequences_) {  // into the backward layer's own step order
      Tensor r = buffer("bidirectional/dy_backward_reversed", h);
      ew_->reverse_steps(dyb, r);
      dyb = r;
    }
    Tensor& dxf = *dx[0];
    fwd_->backward({&in}, yf, dyf, {&dxf});
    const bool want_dx = dxf.defined();
    Tensor dxr = want_dx ? buffer("bidirectional/dx_reversed", in.shape()) : Tensor();
    bwd_->backward({&xr_.get()}, yb, dyb, {&dxr});
    if (want_dx) {
      Tensor back = buffer("bidirectional/dx_backward", in.shape());
      ew_->reverse_steps(dxr, back);
      ew_->accumulate(back, dxf);
    }
  }

 private:
  // The backward layer's output in x's step order (kept for mul's backward).
  const Tensor& reversed(const Tensor& yb) {
    Tensor& r = ybr_.at(ctx(), yb.shape());
    ew_->reverse_steps(yb, r);
    return r;
  }
  // Views for the multiply op: [rows, 1, units] and [rows, units].
  static Tensor rows(const Tensor& t) {
    const int64_t u = t.shape().back();
    return t.reshape(Shape{u ? t.numel() / u : 0, 1, u});
  }
  static Tensor flat(const Tensor& t) {
    const int64_t u = t.shape().back();
    return t.reshape(Shape{u ? t.numel() / u : 0, u});
  }
  Tensor buffer(const char* slot, const Shape& s) {
    return Tensor::view(transient(slot).get(ctx(), size_t(s.numel()) * sizeof(float)), s, DType::F32, ctx().device());
  }

  cfg::Node inner_;  // the wrapped layer's mapping (its messages' location)
  std::string inner_type_, inner_name_;
  Merge merge_ = Merge::Concat;
  std::unique_ptr<Layer> fwd_, bwd_;
  Shape half_;             // each layer's output (without batch)
  bool sequences_ = false;
  int split_ = 0;          // the forward layer's parameter count
  HeldTensor yf_, yb_, xr_, ybr_;
  KernelSlot<ElementwiseKernel> ew_;
  KernelSlot<MultiplyKernel> mul_;
};

RegisterLayer<Bidirectional> reg("bidirectional", "Bidirectional");

}  // namespace
}  // namespace trainer
