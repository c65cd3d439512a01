// Layer exporters by layer type: each family's file (core/export/layers/*.cpp) registers the
// function that writes its layers as ONNX nodes; a type without one is refused at its config line.
#pragma once
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/export/context.h"

namespace trainer::onnx_export {

// Adds node `i`'s ONNX nodes and sets its output (ctx.set_output). Its inputs are exported already
// (nodes come in topological order). What it cannot express is a ConfigError at the layer
// (ctx.node(i).layer->spec().fail(...)).
using LayerExporter = std::function<void(ExportContext& ctx, size_t i)>;

struct ExporterInfo {
  LayerExporter run;
  // The layer applies ExportContext::folded_into(i) — a batch norm after it folded into its
  // weights per output channel (the trainer's last axis) — so the batch norm can be left out.
  bool folds_batchnorm = false;
};

void register_exporter(const std::string& type, ExporterInfo info);
const ExporterInfo* find_exporter(const std::string& type);
std::vector<std::string> exported_types();

struct RegisterExporter {
  RegisterExporter(std::initializer_list<const char*> types, const LayerExporter& f, bool folds_batchnorm = false) {
    for (const char* t : types) register_exporter(t, {f, folds_batchnorm});
  }
};

}  // namespace trainer::onnx_export
