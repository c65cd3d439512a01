// export_onnx: the graph's layers through their registered exporters into one ONNX ModelProto.
#include "core/export/onnx_export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

#include "core/export/context.h"
#include "core/export/normalize.h"
#include "core/export/registry.h"
#include "core/io/config.h"
#include "core/io/file.h"

namespace trainer {

int64_t onnx_ir_version(int opset) { return opset <= 14 ? 7 : 8; }

namespace onnx_export {
namespace {

// A graph input or output: float32 [N, ...] with the batch as the symbolic dimension "N".
void add_value_info(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
                    const Shape& shape, const std::string& doc) {
  onnx::ValueInfoProto* v = list->Add();
  v->set_name(name);
  if (!doc.empty()) v->set_doc_string(doc);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("N");
  for (int64_t d : onnx_dims(shape)) s->add_dim()->set_dim_value(d);
}

std::string describe_value(const std::string& name, const Shape& shape) {
  return fmt::format("{} [N, {}] float32{}", name, fmt::join(onnx_dims(shape), ", "), shape.rank() == 3 ? " (NCHW)" : "");
}

// Batch norms folded into the conv/dense layer before them: where that layer's exporter can fold,
// its output feeds only the batch norm, it is not the model's output, and its weights are its own
// (a shared layer's weights serve other inputs, which no batch norm follows).
size_t plan_folding(ExportContext& ctx) {
  const Graph& g = ctx.graph();
  size_t folded = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const GraphNode& bn = g.nodes()[i];
    if (bn.layer->type() != "batchnorm" || bn.inputs.size() != 1 || is_model_input(bn.inputs[0])) continue;
    const size_t p = size_t(bn.inputs[0]);
    const GraphNode& prod = g.nodes()[p];
    const ExporterInfo* e = find_exporter(prod.layer->type());
    if (!e || !e->folds_batchnorm || prod.consumers != 1 || int(p) == g.output_node() || prod.shares >= 0 ||
        !prod.sharers.empty() || bn.shares >= 0 || !bn.sharers.empty())
      continue;
    ctx.fold(p, i, batchnorm_affine(ctx, i));
    ++folded;
  }
  return folded;
}

// The model's inputs; with `normalize`, an image input goes through Sub and Mul first.
std::string add_inputs(ExportContext& ctx, onnx::GraphProto* graph, const Augment& augment, const CheckpointInfo& c,
                       bool normalize, std::vector<std::string>& described) {
  const Graph& g = ctx.graph();
  std::string expects;
  for (size_t k = 0; k < g.input_names().size(); ++k) {
    const std::string& name = g.input_names()[k];
    const Shape& shape = g.input_shapes()[k];
    std::string doc;
    Value v{name, shape};
    if (shape.rank() == 3) {
      const InputNormalization n = input_normalization(augment, c, shape);
      if (normalize && !n.identity) {
        std::string x = name;
        if (!n.sub.empty()) {
          const std::string sub = ctx.add_initializer(name + "/mean", n.sub_dims, n.sub, "the training normalisation's mean");
          const std::string y = ctx.fresh(name + "/centred");
          ctx.add_node("Sub", {x, sub}, {y});
          x = y;
        }
        if (!n.mul.empty()) {
          const std::string mul = ctx.add_initializer(name + "/multiplier", n.mul_dims, n.mul,
                                                      "the training normalisation's multiplier (scale / std)");
          const std::string y = ctx.fresh(name + "/normalised");
          ctx.add_node("Mul", {x, mul}, {y});
          x = y;
        }
        v.name = x;
      }
      doc = normalize || n.identity
                ? fmt::format("raw pixels 0..255, RGB, NCHW; the model normalises them as training did: {}", n.text)
                : fmt::format("the normalised image, NCHW, RGB: x = {} with pixels 0..255, as training fed it", n.text);
    } else {
      doc = fmt::format("the model input as the trainer takes it ({})", shape.str());
    }
    add_value_info(graph->mutable_input(), name, shape, doc);
    ctx.set_model_input(k, v);
    described.push_back(describe_value(name, shape));
    expects += fmt::format("{}{}: {}", expects.empty() ? "" : "; ", name, doc);
  }
  return expects;
}

}  // namespace
}  // namespace onnx_export

OnnxExportReport export_onnx(const ModelSpec& model, const Augment& augment, const CheckpointInfo& c,
                             const OnnxExportOptions& o, const std::string& path) {
  using namespace onnx_export;
  if (o.opset < kOnnxMinOpset || o.opset > kOnnxMaxOpset)
    throw cfg::ConfigError("--opset", fmt::format("opset {} is not written; choose {} to {} (default {})", o.opset,
                                                  kOnnxMinOpset, kOnnxMaxOpset, kOnnxDefaultOpset));
  const Graph g(model);
  // Every layer type must have an exporter before any work: refused at the first that has none.
  for (const GraphNode& n : g.nodes())
    if (!find_exporter(n.layer->type()))
      n.layer->spec().fail(fmt::format("{} layer '{}' cannot be exported to ONNX (no ONNX operator expresses it here); "
                                       "layers that can: {}",
                                       n.layer->type(), n.layer->name(), fmt::join(exported_types(), ", ")));
  const CheckpointWeights w(c, g.params(), o.prefer_average);

  onnx::ModelProto m;
  OnnxExportReport r;
  r.opset = o.opset;
  r.ir_version = onnx_ir_version(o.opset);
  r.average = w.average();
  m.set_ir_version(r.ir_version);
  m.set_producer_name("trainer");
  m.set_producer_version(TRAINER_VERSION);
  onnx::OperatorSetIdProto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(o.opset);
  onnx::GraphProto* graph = m.mutable_graph();
  graph->set_name(o.model_name.empty() ? "model" : o.model_name);

  ExportContext ctx(g, w, o.opset, graph);
  ctx.set_relu6_clip(o.relu6_clip);
  r.expects = add_inputs(ctx, graph, augment, c, o.normalize, r.inputs);
  r.folded_batchnorms = o.keep_batchnorm ? 0 : plan_folding(ctx);
  for (size_t i = 0; i < g.nodes().size(); ++i) find_exporter(g.nodes()[i].layer->type())->run(ctx, i);

  const size_t out = size_t(g.output_node());
  Value y = ctx.output(out);
  if (y.name != ctx.output_name(out)) {  // the last layer left nothing to do (dropout, a folded batch norm)
    ctx.add_node("Identity", {y.name}, {ctx.output_name(out)});
    y.name = ctx.output_name(out);
  }
  add_value_info(graph->mutable_output(), y.name, g.output_shape(), "the model's output (its last layer's)");
  r.output = describe_value(y.name, g.output_shape());

  const std::string weights = w.average() ? "the moving average of the weights (train.ema)" : "the trained weights";
  m.set_doc_string(fmt::format("{} exported by trainer from {} ({}, batch norms {}). Input {}", graph->name(), c.weights,
                               weights, o.keep_batchnorm ? "kept" : "folded", r.expects));
  auto meta = [&](const std::string& k, const std::string& v) {
    onnx::StringStringEntryProto* e = m.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  };
  meta("trainer.checkpoint", c.weights);
  meta("trainer.weights", w.average() ? "ema" : "trained");
  meta("trainer.input", o.normalize ? "pixels" : "normalised");

  r.nodes = size_t(graph->node_size());
  r.initializers = size_t(graph->initializer_size());
  std::string bytes;
  if (!m.SerializeToString(&bytes))
    throw std::runtime_error(fmt::format("the ONNX model for {} could not be serialised (over 2 GiB?)", path));
  r.bytes = bytes.size();
  write_file_atomic(path, bytes);
  return r;
}

}  // namespace trainer
