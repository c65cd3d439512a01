// `trainer export RUN_DIR|CHECKPOINT --onnx FILE [--opset N] [--normalize] [--keep-batchnorm] [--relu6 relus|clip] [--no-ema]`
#include <fmt/format.h>

#include "cmd/trainer/checkpoint_run.h"
#include "cmd/trainer/command.h"
#include "core/export/onnx_export.h"
#include "core/io/file.h"
#include "core/run/spec.h"

namespace trainer::cli {
namespace {

struct ExportArgs {
  std::string target, onnx, config;
  std::vector<std::string> sets;
  int opset = kOnnxDefaultOpset;
  std::string relu6 = "relus";
  bool normalize = false, keep_batchnorm = false, no_ema = false;
};

int export_model(const ExportArgs& a) {
  const auto [c, spec] = open_checkpoint_run(a.target, a.config, a.sets);
  OnnxExportOptions o;
  o.opset = a.opset;
  o.normalize = a.normalize;
  o.keep_batchnorm = a.keep_batchnorm;
  o.prefer_average = !a.no_ema;
  o.relu6_clip = a.relu6 == "clip";
  o.model_name = spec.name;
  const OnnxExportReport r = export_onnx(spec.model, spec.data.augment, c, o, a.onnx);
  fmt::print("Checkpoint: {} (epoch {}, step {}), {}\n", c.weights, c.state.epoch + (c.state.step_in_epoch ? 1 : 0),
             c.state.global_step, r.average ? "moving-average weights (train.ema)" : "trained weights");
  fmt::print("Wrote {} ({}): ONNX opset {}, IR version {}, {} nodes, {} initializers, batch norms {}\n", a.onnx,
             format_bytes(r.bytes), r.opset, r.ir_version, r.nodes, r.initializers,
             a.keep_batchnorm ? "kept" : fmt::format("folded ({})", r.folded_batchnorms));
  for (const std::string& in : r.inputs) fmt::print("Input:  {}\n", in);
  fmt::print("Output: {}\n", r.output);
  fmt::print("Expects {}\n", r.expects);
  return kOk;
}

const RegisterCommand reg_export({"export", "Export a run's checkpoint as an ONNX model", [](CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  app.add_option("target", a->target, "A run directory (its newest valid checkpoint) or a checkpoint file")->required();
  app.add_option("--onnx", a->onnx, "The ONNX file to write")->required();
  // (the range is checked by export_onnx, whose message names the opsets written)
  app.add_option("--opset", a->opset,
                 fmt::format("ONNX opset, {} to {} (default {})", kOnnxMinOpset, kOnnxMaxOpset, kOnnxDefaultOpset));
  app.add_flag("--normalize", a->normalize,
               "Put the training normalisation inside the model: it takes raw pixels 0..255 (default: the normalised tensor)");
  app.add_flag("--keep-batchnorm", a->keep_batchnorm,
               "Keep batch norms as BatchNormalization nodes (default: folded into the conv/dense before them)");
  app.add_option("--relu6", a->relu6,
                 "relu6 as 'relus' (default): Relu(x) - Relu(x - 6), read by every runtime, OpenCV 4.6 included; or "
                 "'clip': one Clip(x, 0, 6), which ONNX Runtime, TensorRT and OpenCV >= 4.7 fuse into the convolution")
      ->check(CLI::IsMember({"relus", "clip"}));
  app.add_flag("--no-ema", a->no_ema, "The trained weights, not their moving average (train.ema) when the checkpoint has one");
  app.add_option("--config", a->config, "The config to build the model from (default: the run's config.yaml)");
  app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
  return [a] { return export_model(*a); };
}});

}  // namespace
}  // namespace trainer::cli
