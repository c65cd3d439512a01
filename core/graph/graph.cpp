// Graph construction (layers, shapes, parameters) and the layer-wise forward/backward passes.
#include "core/graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>

#include <unistd.h>

#include "core/graph/memory_plan.h"
#include "core/ops/elementwise.h"

namespace trainer {

namespace {

// Bytes of physical memory (0 when unknown): no replica can hold parameters larger than that,
// since every device's weights are also kept on the host (initialisation, checkpoints).
uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

Graph::Graph(const ModelSpec& spec) : store_(std::make_shared<ParamStore>()) {
  static const uint64_t memory = physical_memory();
  uint64_t param_bytes = 0;
  std::map<std::string, int> index;
  std::map<std::string, int> group_owner;  // parameter group ("lstm_a") -> its first node
  std::vector<std::string> group_of;
  std::vector<ParamEntry> entries;
  for (const ModelInput& in : spec.inputs) {
    input_shapes_.push_back(in.shape);
    input_names_.push_back(in.name);
  }
  for (const LayerDef& def : spec.layers) {
    const LayerInfo* info = find_layer(def.type);
    const cfg::Node& config = def.config.defined() ? def.config : def.node;
    cfg::MapReader reader(config, fmt::format("{} layer '{}'", def.type, def.params_of.empty() ? def.name : def.params_of));
    reader.allow({"name", "type", "inputs"});
    GraphNode n;
    n.layer = info->make(reader);
    reader.finish();
    n.layer->set_identity(def.name, def.type, def.node);

    std::vector<Shape> in_shapes;
    for (const std::string& in : def.inputs) {
      int k = spec.input_index(in);
      if (k >= 0) {
        n.inputs.push_back(-1 - k);
        in_shapes.push_back(input_shapes_[size_t(k)]);
      } else {
        int j = index.at(in);
        n.inputs.push_back(j);
        nodes_[size_t(j)].consumers++;
        in_shapes.push_back(nodes_[size_t(j)].shape);
      }
    }
    int k = int(in_shapes.size());
    if (k < n.layer->min_inputs() || (n.layer->max_inputs() >= 0 && k > n.layer->max_inputs())) {
      std::string want = n.layer->max_inputs() < 0 ? fmt::format("at least {}", n.layer->min_inputs())
                         : n.layer->min_inputs() == n.layer->max_inputs() ? fmt::format("{}", n.layer->min_inputs())
                         : fmt::format("{} to {}", n.layer->min_inputs(), n.layer->max_inputs());
      def.node.fail(fmt::format("{} layer '{}' takes {} input(s), got {}", def.type, def.name, want, k));
    }
    n.shape = n.layer->infer(in_shapes);
    // Element counts must stay far from int64 overflow (a config can ask for absurd sizes).
    auto too_big = [](const Shape& sh) {
      int64_t c = 1;
      for (int64_t d : sh.dims())
        if (d > 0 && __builtin_mul_overflow(c, d, &c)) return true;
      return c > (int64_t(1) << 40);
    };
    if (too_big(n.shape))
      def.node.fail(fmt::format("{} layer '{}' would produce an output of more than 2^40 values per sample", def.type, def.name));
    for (const ParamSpec& p : n.layer->params())
      if (too_big(p.shape))
        def.node.fail(fmt::format("{} layer '{}' would have a parameter of more than 2^40 values", def.type, def.name));
    for (int64_t d : n.shape.dims())
      if (d <= 0)
        def.node.fail(fmt::format("{} layer '{}' would produce an empty output ({}) from input {}", def.type, def.name,
                                  n.shape.str(), in_shapes[0].str()));
    const std::string group = def.params_of.empty() ? def.name : def.params_of;
    const int self = int(nodes_.size());
    auto owner = group_owner.find(group);
    if (owner == group_owner.end()) {
      group_owner[group] = self;
      for (const ParamSpec& p : n.layer->params()) {
        n.params.push_back(entries.size());
        entries.push_back({group + "/" + p.name, p, 0});
        param_bytes += uint64_t(p.shape.numel()) * sizeof(float);  // each below 2^40 values: no overflow
      }
      if (memory && param_bytes > memory)
        def.node.fail(fmt::format("the model's parameters reach {:.1f} GiB with {} layer '{}', more than this machine's "
                                  "{:.1f} GiB of memory", double(param_bytes) / double(1 << 30), def.type, def.name,
                                  double(memory) / double(1 << 30)));
    } else {  // a second use: the first node's parameters, which must fit these inputs
      GraphNode& o = nodes_[size_t(owner->second)];
      std::vector<ParamSpec> mine = n.layer->params(), theirs = o.layer->params();
      for (size_t p = 0; p < mine.size(); ++p)
        if (mine[p].shape != theirs[p].shape)
          def.node.fail(fmt::format("layer '{}' shares '{}', but its input {} would need {} of shape {}, not {}", def.name,
                                    group, in_shapes[0].str(), mine[p].name, mine[p].shape.str(), theirs[p].shape.str()));
      n.shares = owner->second;
      o.sharers.push_back(self);
    }
    group_of.push_back(group);
    index[def.name] = self;
    nodes_.push_back(std::move(n));
  }
  output_ = index.at(spec.output);
  keep_f32_.assign(nodes_.size(), false);
  keep_f32_[size_t(output_)] = true;  // the engine reads it
  store_->layout(std::move(entries));
  frontier_.assign(nodes_.size() + 1, 0);
  // layout() reorders entries (trainable first): map each node's parameters by name again.
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < store_->entries().size(); ++i) by_name[store_->entries()[i].name] = i;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    GraphNode& n = nodes_[i];
    n.params.clear();
    for (const ParamSpec& p : n.layer->params()) n.params.push_back(by_name.at(group_of[i] + "/" + p.name));
  }
  // A sharer's parameters are final only after their owner's backward: only owners count.
  frontier_[nodes_.size()] = store_->trainable_floats();
  for (size_t i = nodes_.size(); i-- > 0;) {
    frontier_[i] = frontier_[i + 1];
    if (nodes_[i].shares >= 0) continue;
    for (size_t p : nodes_[i].params)
      if (store_->entries()[p].spec.trainable) frontier_[i] = std::min(frontier_[i], store_->entries()[p].offset);
  }
}

int Graph::node_index(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].layer->name() == name) return int(i);
  return -1;
}

int64_t Graph::flops_per_sample() const {
  int64_t f = 0;
  for (const GraphNode& n : nodes_) f += n.layer->flops();
  return f;
}

void Graph::bind(OpContext& ctx, uint64_t seed) {
  store_->allocate(ctx, seed);
  bind_layers(ctx);
}

void Graph::bind_shared(OpContext& ctx, Graph& owner) {
  if (owner.store_->entries().size() != store_->entries().size()) throw std::logic_error("Graph::bind_shared: another model");
  store_ = owner.store_;
  bind_layers(ctx);
}

void Graph::bind_layers(OpContext& ctx) {
  ctx_ = &ctx;
  shadow_.assign(nodes_.size(), {});
  for (size_t i = 0; i < nodes_.size(); ++i) {
    GraphNode& n = nodes_[i];
    std::vector<Tensor> w, g;
    for (size_t p : n.params) {
      const ParamEntry& e = store_->entries()[p];
      w.push_back(store_->weight_view(p));
      if (!e.spec.trainable) continue;
      if (n.shares < 0) {
        g.push_back(store_->grad_view(p));
      } else {  // its own gradient buffer, added into the owner's after the owner's backward
        shadow_[i].push_back(ctx.zeros(e.spec.shape));
        g.push_back(shadow_[i].back());
      }
    }
    n.layer->bind(ctx, std::move(w), std::move(g));
  }
  elementwise_ = make_kernel<ElementwiseKernel>(ctx, {});
  input_grad_on_.assign(input_shapes_.size(), false);
  input_grad_written_.assign(input_shapes_.size(), false);
  batch_ = -1;
}

void Graph::set_input_grad(int k, bool on) {
  input_grad_on_.at(size_t(k)) = on;
  batch_ = -1;
}

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

}  // namespace

// Each node's output type (Layer::mixed_precision) from the context's precision (its low type:
// bf16 or f16) and the model inputs' types; everything is f32 under fp32.
void Graph::plan_precision() {
  const DType low = low_dtype(ctx_->precision());
  const bool mixed = low != DType::F32;
  dtypes_.assign(nodes_.size(), DType::F32);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode& n = nodes_[i];
    const MixedPrecision mp = mixed && !keep_f32_[i] ? n.layer->mixed_precision() : MixedPrecision::F32;
    bool all_low = true;
    for (int j : n.inputs)
      all_low &= (is_model_input(j) ? input_dtypes_[size_t(model_input_index(j))] : dtypes_[size_t(j)]) == low;
    if (mp == MixedPrecision::Low || (mp == MixedPrecision::Follow && all_low)) dtypes_[i] = low;
  }
}

void Graph::ensure_buffers(int64_t batch) {
  bool same_types = inputs_.size() == input_dtypes_.size();
  for (size_t k = 0; same_types && k < inputs_.size(); ++k) same_types = inputs_[k]->dtype() == input_dtypes_[k];
  if (batch == batch_ && same_types) return;  // every step: nothing to allocate
  input_dtypes_.clear();
  for (const Tensor* t : inputs_) input_dtypes_.push_back(t->dtype());
  plan_precision();
  const size_t n = nodes_.size();
  acts_.assign(n, Tensor());
  grads_.assign(n, Tensor());
  cast_.assign(n, Tensor());
  input_cast_.assign(inputs_.size(), Tensor());
  in_place_of_ = plan_in_place(nodes_, dtypes_, output_);
  const std::vector<int>& over = in_place_of_;
  plan_fusion();
  for (size_t i = 0; i < n; ++i)
    acts_[i] = over[i] >= 0 ? acts_[size_t(over[i])] : ctx_->empty(nodes_[i].shape.with_batch(batch), dtypes_[i]);
  // Converted copies, and the scratch for input gradients computed apart: at most every input of
  // one node at once, in that node's type (64-byte aligned pieces).
  int64_t scratch = 64;
  for (size_t i = 0; i < n; ++i) {
    int64_t need = 0;
    for (int j : nodes_[i].inputs) {
      const bool model = is_model_input(j);
      const size_t m = model ? size_t(model_input_index(j)) : size_t(j);
      const Shape shape = (model ? input_shapes_[m] : nodes_[m].shape).with_batch(batch);
      const DType from = model ? input_dtypes_[m] : dtypes_[m];
      need += (shape.numel() * int64_t(dtype_size(dtypes_[i])) + 63) / 64 * 64;
      if (!is_float(from) || from == dtypes_[i]) continue;
      Tensor& cast = model ? input_cast_[m] : cast_[m];
      if (!cast.defined()) cast = ctx_->empty(shape, dtypes_[i]);
    }
    scratch = std::max(scratch, need);
  }
  std::vector<int64_t> sizes;
  std::vector<size_t> buffer = plan_gradients(nodes_, over, dtypes_, batch, sizes);
  grad_pool_.clear();
  for (int64_t sz : sizes) grad_pool_.push_back(ctx_->empty(Shape{std::max<int64_t>(sz, 1)}, DType::U8));
  for (size_t i = 0; i < n; ++i) {
    const Tensor& b = grad_pool_[buffer[i]];
    grads_[i] = Tensor::view(b.data(), nodes_[i].shape.with_batch(batch), dtypes_[i], b.device());
  }
  input_grads_.assign(input_shapes_.size(), Tensor());
  for (size_t k = 0; k < input_shapes_.size(); ++k)
    if (input_grad_on_[k])
      input_grads_[k] = ctx_->empty(input_shapes_[k].with_batch(batch), is_float(input_dtypes_[k]) ? input_dtypes_[k] : DType::F32);
  scratch_ = ctx_->empty(Shape{scratch}, DType::U8);
  grad_written_.assign(n, false);
  cast_done_.assign(n, false);
  input_cast_done_.assign(inputs_.size(), false);
  batch_ = batch;
}

// An activation running in place over a producer that can apply it (Layer::fuse_activation) is
// done by the producer: one pass over the data instead of two, forward and backward. Not into a
// node read from outside (keep_f32), whose output must be its own.
void Graph::plan_fusion() {
  const size_t n = nodes_.size();
  std::vector<int> consumer(n, -1);  // per producer: the activation that would fuse into it
  for (size_t i = 0; i < n; ++i) {
    const int j = in_place_of_[i];
    if (j >= 0 && !keep_f32_[size_t(j)] && nodes_[i].layer->activation()) consumer[size_t(j)] = int(i);
  }
  fused_into_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) nodes_[i].layer->set_fused(false);
  for (size_t j = 0; j < n; ++j) {
    const int i = consumer[j];
    if (i >= 0 && nodes_[j].layer->fuse_activation(nodes_[size_t(i)].layer->activation())) {
      nodes_[size_t(i)].layer->set_fused(true);
      fused_into_[size_t(i)] = int(j);
    } else {
      nodes_[j].layer->fuse_activation(std::nullopt);  // a previous plan's fusion ends
    }
  }
}

// Node i's input j as node i computes: the producer's output, or its converted copy (made on the
// first read of a pass: a device-parallel hook may fill a model input just before its reader).
const Tensor& Graph::input_as(int i, int j) {
  const bool model = is_model_input(j);
  const size_t m = model ? size_t(model_input_index(j)) : size_t(j);
  const Tensor& src = model ? *inputs_[m] : acts_[m];
  if (!is_float(src.dtype()) || src.dtype() == dtypes_[size_t(i)]) return src;
  Tensor& cast = model ? input_cast_[m] : cast_[m];
  std::vector<bool>::reference done = model ? input_cast_done_[m] : cast_done_[m];
  if (!done) {
    elementwise_->convert(src, cast);
    done = true;
  }
  return cast;
}

void Graph::set_step_seed(uint64_t seed) {
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i].layer->set_step_seed(seed * 1000003ull + i);
}

void Graph::set_profiling(bool on) {
  if (on && !profiling_) times_.assign(nodes_.size(), LayerTime{});  // a fresh count; kept after
  profiling_ = on;
}

namespace {
// Adds the wall time of its scope (after synchronising the context) to `*acc`, when enabled.
class ScopeTimer {
 public:
  ScopeTimer(bool on, OpContext& ctx, double* acc) : on_(on), ctx_(ctx), acc_(acc) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~ScopeTimer() {
    if (!on_) return;
    ctx_.synchronize();
    *acc_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  bool on_;
  OpContext& ctx_;
  double* acc_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace

void Graph::forward(const std::vector<const Tensor*>& inputs, bool training, int until) {
  if (!ctx_) throw std::logic_error("Graph::forward before bind");
  if (inputs.size() != input_shapes_.size())
    throw std::invalid_argument(fmt::format("{} input tensors for a model of {} inputs", inputs.size(), input_shapes_.size()));
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k]->shape().without_batch() != input_shapes_[k] || inputs[k]->dim(0) != inputs[0]->dim(0))
      throw std::invalid_argument(fmt::format("input batch has samples of shape {}, the model expects {}",
                                              inputs[k]->shape().without_batch().str(), input_shapes_[k].str()));
  inputs_ = inputs;
  ensure_buffers(inputs[0]->dim(0));
  std::fill(cast_done_.begin(), cast_done_.end(), false);
  std::fill(input_cast_done_.begin(), input_cast_done_.end(), false);
  if (until < 0) until = output_;
  std::vector<const Tensor*> in;
  for (int i = 0; i <= until; ++i) {
    GraphNode& n = nodes_[size_t(i)];
    if (hooks_.before_forward) hooks_.before_forward(i);
    in.clear();
    for (int j : n.inputs) in.push_back(&input_as(i, j));
    {
      ScopeTimer t(profiling_, *ctx_, profiling_ ? &times_[size_t(i)].forward : nullptr);
      n.layer->forward(in, acts_[size_t(i)], training);
    }
    if (hooks_.after_forward) hooks_.after_forward(i);
  }
}

void Graph::zero_param_grads(const GraphNode& n, int node) {
  if (n.shares >= 0) {
    for (Tensor& g : shadow_[size_t(node)]) ctx_->fill_zero(g.data(), g.bytes());
    return;
  }
  for (size_t p : n.params)
    if (store_->entries()[p].spec.trainable) {
      Tensor g = store_->grad_view(p);
      ctx_->fill_zero(g.data(), g.bytes());
    }
}

void Graph::finish_params(int node) {
  const GraphNode& n = nodes_[size_t(node)];
  for (int s : n.sharers) {
    size_t q = 0;
    for (size_t p : n.params)
      if (store_->entries()[p].spec.trainable) {
        Tensor g = store_->grad_view(p);
        elementwise_->accumulate(shadow_[size_t(s)][q++], g);
      }
  }
}

void Graph::add_grad(int node, const Tensor& g) {
  Tensor& dst = grads_[size_t(node)];
  if (g.numel() != dst.numel()) throw std::logic_error("Graph::add_grad: shape mismatch");
  if (!grad_written_[size_t(node)]) {
    elementwise_->convert(g, dst);
    grad_written_[size_t(node)] = true;
  } else {
    elementwise_->accumulate(g, dst);
  }
}

void Graph::backward(const Tensor& dy_from, int from) {
  std::fill(grad_written_.begin(), grad_written_.end(), false);
  grad_written_[size_t(from)] = true;
  run_backward(from, &dy_from);
}

void Graph::backward_all() { run_backward(int(nodes_.size()) - 1, nullptr); }

void Graph::run_backward(int from, const Tensor* dy_from) {
  if (!dy_from) std::fill(grad_written_.begin(), grad_written_.end(), false);
  std::fill(input_grad_written_.begin(), input_grad_written_.end(), false);
  for (size_t i = size_t(from) + 1; i < nodes_.size(); ++i) zero_param_grads(nodes_[i], int(i));
  if (hook_) hook_(frontier_[size_t(from) + 1]);
  std::vector<const Tensor*> in;
  std::vector<Tensor> dx_store;
  std::vector<Tensor*> dx;
  struct Apart {
    Tensor* into = nullptr;  // the gradient this input's part goes into
    bool add = false;        // added to it (else converted into it)
  };
  std::vector<Apart> apart;
  for (int i = from; i >= 0; --i) {
    GraphNode& n = nodes_[size_t(i)];
    if (hooks_.before_backward) hooks_.before_backward(i);
    const Tensor* dy = (i == from && dy_from) ? dy_from : &grads_[size_t(i)];
    if (!grad_written_[size_t(i)]) {  // nothing downstream reached this node
      zero_param_grads(n, i);
      finish_params(i);
      if (hooks_.after_backward) hooks_.after_backward(i);
      if (hook_ && frontier_[size_t(i)] < frontier_[size_t(i) + 1]) hook_(frontier_[size_t(i)]);
      continue;
    }
    in.clear();
    dx_store.assign(n.inputs.size(), Tensor());
    apart.assign(n.inputs.size(), Apart{});
    size_t scratch_used = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int j = n.inputs[k];
      bool model_input = is_model_input(j);
      size_t m = model_input ? size_t(model_input_index(j)) : size_t(j);
      in.push_back(&input_as(i, j));
      if (model_input && !input_grad_on_[m]) {  // no gradient wanted: an undefined tensor that still has its shape
        const DType t = in.back()->dtype();
        dx_store[k] = Tensor::view(nullptr, inputs_[m]->shape(), is_float(t) ? t : DType::F32, inputs_[m]->device());
        continue;
      }
      Tensor& g = model_input ? input_grads_[m] : grads_[m];
      std::vector<bool>::reference written = model_input ? input_grad_written_[m] : grad_written_[m];
      bool taken = written;
      for (size_t q = 0; q < k; ++q) taken |= n.inputs[q] == j;
      written = true;
      if (!taken && g.dtype() == dtypes_[size_t(i)]) {
        dx_store[k] = g;
        continue;
      }
      // A second contribution, or one of another type: computed apart in this node's type, then
      // added into g or (the first) converted into it.
      const size_t bytes = size_t(g.numel()) * dtype_size(dtypes_[size_t(i)]);
      if (scratch_used + bytes > scratch_.bytes()) {
        dx_store[k] = ctx_->empty(g.shape(), dtypes_[size_t(i)]);
      } else {
        dx_store[k] = Tensor::view(static_cast<char*>(scratch_.data()) + scratch_used, g.shape(), dtypes_[size_t(i)], g.device());
        scratch_used += (bytes + 63) / 64 * 64;
      }
      apart[k] = {&g, taken};
    }
    dx.clear();
    for (Tensor& t : dx_store) dx.push_back(&t);
    {
      ScopeTimer t(profiling_, *ctx_, profiling_ ? &times_[size_t(i)].backward : nullptr);
      n.layer->backward(in, acts_[size_t(i)], *dy, dx);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (!apart[k].into) continue;
        if (apart[k].add) elementwise_->accumulate(dx_store[k], *apart[k].into);
        else elementwise_->convert(dx_store[k], *apart[k].into);
      }
      finish_params(i);
    }
    if (hooks_.after_backward) hooks_.after_backward(i);
    if (hook_ && frontier_[size_t(i)] < frontier_[size_t(i) + 1]) hook_(frontier_[size_t(i)]);
  }
  if (hook_) hook_(0);
}

}  // namespace trainer
