// ExportContext: tensors, weights, folded batch norms and node helpers for the layer exporters.
#include "core/export/context.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace trainer::onnx_export {

std::vector<int64_t> onnx_dims(const Shape& s) {
  if (s.rank() == 3) return {s[2], s[0], s[1]};
  return s.dims();
}

int64_t channel_axis(const Shape& s) { return s.rank() == 3 ? 1 : int64_t(s.rank()); }

ExportContext::ExportContext(const Graph& g, const CheckpointWeights& w, int opset, onnx::GraphProto* graph)
    : g_(g), w_(w), opset_(opset), graph_(graph), outputs_(g.nodes().size()), model_inputs_(g.input_names().size()) {
  for (const std::string& n : g.input_names()) taken_.insert(n);
  for (const GraphNode& n : g.nodes()) {
    reserved_.push_back(fresh(n.layer->name()));
  }
}

void ExportContext::set_model_input(size_t k, Value v) { model_inputs_.at(k) = std::move(v); }

const Value& ExportContext::input(size_t node, size_t i) const {
  int j = g_.nodes()[node].inputs.at(i);
  if (is_model_input(j)) return model_inputs_.at(size_t(model_input_index(j)));
  return output(size_t(j));
}

const Value& ExportContext::output(size_t node) const {
  const std::optional<Value>& v = outputs_.at(node);
  if (!v) throw std::logic_error(fmt::format("onnx export: layer '{}' read before it was exported", g_.nodes()[node].layer->name()));
  return *v;
}

void ExportContext::set_output(size_t node, Value v) { outputs_.at(node) = std::move(v); }

// By the layer's own name for it: a tied parameter ("kernel" of a dense layer tied to an embedding)
// is the owner's entry ("tokens/embeddings", in the owner's layout).
const ParamEntry& ExportContext::param_entry(size_t node, const std::string& param) const {
  const GraphNode& n = g_.nodes()[node];
  const std::vector<ParamSpec> specs = n.layer->params();
  for (size_t k = 0; k < specs.size() && k < n.params.size(); ++k)
    if (specs[k].name == param) return g_.params().entries()[n.params[k]];
  throw std::logic_error(fmt::format("onnx export: layer '{}' has no parameter '{}'", n.layer->name(), param));
}

bool ExportContext::has_param(size_t node, const std::string& param) const {
  for (const ParamSpec& p : g_.nodes()[node].layer->params())
    if (p.name == param) return true;
  return false;
}

std::vector<float> ExportContext::param(size_t node, const std::string& param) const {
  return w_.get(param_entry(node, param));
}

void ExportContext::fold(size_t producer, size_t batchnorm, ChannelAffine a) {
  folds_[producer] = std::move(a);
  folded_bns_.insert(batchnorm);
}

const ChannelAffine* ExportContext::folded_into(size_t node) const {
  auto it = folds_.find(node);
  return it == folds_.end() ? nullptr : &it->second;
}

std::string ExportContext::fresh(const std::string& base) {
  std::string name = base;
  for (int k = 2; taken_.count(name); ++k) name = fmt::format("{}#{}", base, k);
  taken_.insert(name);
  return name;
}

std::string ExportContext::add_initializer(const std::string& name, const std::vector<int64_t>& dims,
                                           const std::vector<float>& v, const std::string& doc) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (count != int64_t(v.size()))
    throw std::logic_error(fmt::format("onnx export: initializer '{}' has {} values for {} elements", name, v.size(), count));
  const bool again = initializers_.count(name) > 0;
  const std::string tensor = fresh(name);
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(tensor);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  static_assert(sizeof(float) == 4, "ONNX raw_data is IEEE float32, little-endian (as every supported host)");
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  std::string d = doc;
  if (again) d += std::string(d.empty() ? "" : "; ") + "another copy of '" + name + "' for a further use of a shared layer";
  if (!d.empty()) t->set_doc_string(d);
  initializers_.emplace(name, tensor);
  return tensor;
}

std::string ExportContext::add_int64s(const std::string& name, const std::vector<int64_t>& v) {
  const std::string tensor = fresh(name);
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(tensor);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(int64_t(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return tensor;
}

std::string ExportContext::add_scalar(const std::string& name, float v) {
  const std::string tensor = fresh(name);
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(tensor);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(v);
  return tensor;
}

onnx::NodeProto* ExportContext::add_node(const std::string& op, const std::vector<std::string>& inputs,
                                         const std::vector<std::string>& outputs) {
  onnx::NodeProto* n = graph_->add_node();
  n->set_op_type(op);
  for (const std::string& i : inputs) n->add_input(i);
  for (const std::string& o : outputs) n->add_output(o);
  if (!outputs.empty()) n->set_name(outputs[0]);
  return n;
}

ChannelAffine batchnorm_affine(const ExportContext& ctx, size_t bn) {
  const double eps = ctx.node(bn).layer->describe().real("epsilon");
  const std::vector<float> gamma = ctx.param(bn, "gamma"), beta = ctx.param(bn, "beta");
  const std::vector<float> mean = ctx.param(bn, "moving_mean"), var = ctx.param(bn, "moving_variance");
  ChannelAffine a;
  a.batchnorm = ctx.node(bn).layer->name();
  for (size_t c = 0; c < gamma.size(); ++c) {
    const double s = double(gamma[c]) / std::sqrt(double(var[c]) + eps);
    a.scale.push_back(s);
    a.shift.push_back(double(beta[c]) - double(mean[c]) * s);
  }
  return a;
}

namespace {
onnx::AttributeProto* attr(onnx::NodeProto* n, const std::string& name, onnx::AttributeProto::AttributeType t) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(t);
  return a;
}
}  // namespace

void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) { attr(n, name, onnx::AttributeProto::INT)->set_i(v); }
void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = attr(n, name, onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
void attr_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  onnx::AttributeProto* a = attr(n, name, onnx::AttributeProto::STRINGS);
  for (const std::string& x : v) a->add_strings(x);
}

}  // namespace trainer::onnx_export
