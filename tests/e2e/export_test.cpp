// `trainer export --onnx` checked by implementations nobody here wrote: ONNX's checker (full check)
// and strict shape inference, and OpenCV's DNN module running each model on the inputs given to
// `trainer predict`, whose probabilities it must reproduce within 1e-4 (tests/e2e/onnx/compare.py).
#include "export_util.h"

using namespace e2e_export;

TEST_CASE("e2e export: the quickstart model in OpenCV equals trainer predict within 1e-4 (BN folded/kept, normalised "
          "or not, opsets 13-17, moving average or not)", "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_quickstart");
  train(dir, "quickstart.yaml",
        "--set train.batch_size=8 --set 'data.train={type: synthetic, size: 32, seed: 1}' "
        "--set 'data.val={type: synthetic, size: 8, seed: 2}' --set model.blocks.conv_bn_relu.layers.1.momentum=0 "
        "--set 'train.ema={decay: 0.5}'");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  predict(dir, "x.npy", "p.npy");
  predict(dir, "x.npy", "p_trained.npy", "--no-ema");
  image_variants(dir, "x.npy", "p.npy", "--stats run/norm_stats.npy");
  for (int opset = 13; opset <= 17; ++opset) {
    nlohmann::json j = export_and_compare(dir, "--opset " + std::to_string(opset), "x.npy", "p.npy", "--stats run/norm_stats.npy");
    CHECK(j.value("opset", 0) == opset);
    CHECK(j.value("ir_version", 0) == (opset <= 14 ? 7 : 8));
    CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  }
  // The checkpoint holds a moving average: the default exports it, --no-ema the trained weights,
  // and they differ (so a swap would show).
  nlohmann::json j = export_and_compare(dir, "--no-ema", "x.npy", "p_trained.npy", "--stats run/norm_stats.npy");
  CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  j = export_and_compare(dir, "", "x.npy", "p_trained.npy", "--stats run/norm_stats.npy --tolerance 1",
                         "control, the moving average against predict --no-ema, must differ: ");
  CHECK(j.value("max_abs_diff", 0.0) > 1e-4);
}

TEST_CASE("e2e export: MiniGoogLeNet in OpenCV equals trainer predict within 1e-4 (BN folded/kept, normalised or not)",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_minigooglenet");
  train(dir, "minigooglenet.yaml",
        "--set train.batch_size=4 --set 'data.train={type: synthetic, size: 16, seed: 1}' "
        "--set 'data.val={type: synthetic, size: 4, seed: 2}' --set data.workers=1 "
        "--set model.blocks.conv_module.layers.1.momentum=0");
  write_pixels(dir + "/x.npy", 4, 32, 32);
  predict(dir, "x.npy", "p.npy");
  image_variants(dir, "x.npy", "p.npy", "--stats run/norm_stats.npy");  // per_pixel mean
}

TEST_CASE("e2e export: MobileNetV2 in OpenCV equals trainer predict within 1e-4 (BN folded/kept, normalised or not, "
          "relu6 as Clip checked by onnx)", "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_mobilenetv2");
  train(dir, "mobilenetv2_cats_vs_dogs.yaml",
        "--set train.batch_size=2 --set 'data.train={type: synthetic, size: 4, seed: 1, image_size: 224, classes: 2}' "
        "--set 'data.val={type: synthetic, size: 2, seed: 2, image_size: 224, classes: 2}' --set data.workers=1 "
        "--set model.blocks.conv_bn_relu6.layers.1.momentum=0 --set model.blocks.dw_bn_relu6.layers.1.momentum=0 "
        "--set model.blocks.project.layers.1.momentum=0");
  write_pixels(dir + "/x.npy", 2, 224, 224);
  predict(dir, "x.npy", "p.npy");
  const std::string norm = "--mean 127.5 --scale 0.00784313725490196";  // the config's {mean: 127.5, scale: 1/127.5}
  image_variants(dir, "x.npy", "p.npy", norm);
  // relu6 as one Clip node: valid ONNX (checker, shape inference); OpenCV 4.6 reads only the
  // opset-6 Clip, so it may refuse, and then says why.
  nlohmann::json j = export_and_compare(dir, "--relu6 clip", "x.npy", "p.npy", norm + " --allow-opencv-refusal");
  if (j.value("opencv", "") == "ok") CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
}

TEST_CASE("e2e export: the device-parallel shared-LSTM model in OpenCV equals trainer predict within 1e-4", "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_lstm");
  train(dir, "shared_lstm.yaml",
        "--set train.batch_size=4 "
        "--set 'data.train={type: synthetic_sequences, size: 8, length: 140, features: 256, inputs: 2, sources: 8, seed: 1}' "
        "--set 'data.val={type: synthetic_sequences, size: 4, length: 140, features: 256, inputs: 2, sources: 8, seed: 2, "
        "source_seed: 1}'");
  write_floats(dir + "/x.npy", 3, 2 * 140 * 256);
  predict(dir, "x.npy", "p.npy");
  // compare.py feeds OpenCV each [N, 140, 256] input through a Reshape from [N, 140 * 256]: OpenCV
  // 4.6's Python binding turns a 3-D array into a 2-D multi-channel image.
  nlohmann::json j = export_and_compare(dir, "", "x.npy", "p.npy", "");
  CHECK(j.value("opencv", "") == "ok");
  CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
}

TEST_CASE("e2e export: GELU (exact and tanh form) as Erf / Tanh nodes, SiLU as Sigmoid and Mul: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  for (const char* gelu : {"{name: relu, type: gelu}", "{name: relu, type: gelu, approximate: true}", "{name: relu, type: silu}"}) {
    INFO(gelu);
    const std::string dir = e2e::temp_dir("export_gelu");
    train(dir, "quickstart.yaml",
          "--set train.batch_size=8 --set 'data.train={type: synthetic, size: 32, seed: 1}' "
          "--set 'data.val={type: synthetic, size: 8, seed: 2}' --set 'model.blocks.conv_bn_relu.layers.2=" +
              std::string(gelu) + "'");
    write_pixels(dir + "/x.npy", 5, 32, 32);
    predict(dir, "x.npy", "p.npy");
    nlohmann::json j = export_and_compare(dir, "", "x.npy", "p.npy", "--stats run/norm_stats.npy");
    CHECK(j.value("opencv", "") == "ok");
    CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  }
}

// Keras 3's other activations, most through the `activation:` key of a convolution or dense: at
// opset 13 (hard_silu as x·HardSigmoid(x)) and 17 (HardSwish); a separable_conv2d among them.
TEST_CASE("e2e export: leaky_relu, elu, selu, softplus, hard_sigmoid, hard_silu and mish (LeakyRelu, Elu, Selu, Softplus, HardSigmoid, HardSwish, x·Tanh(Softplus)): OpenCV equals trainer predict within 1e-4 at opsets 13 and 17",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_activations");
  // Weights wider than Keras's defaults, so that each activation's input spans its curved range and
  // the probabilities are far from uniform: a wrong alpha or formula moves them by more than 1e-4.
  e2e::write_file(dir + "/act.yaml", R"(name: activations_export
seed: 3
model:
  input: [16, 16, 3]
  layers:
    - {name: c1, type: conv2d, filters: 6, kernel: 3, padding: same, activation: leaky_relu, kernel_initializer: &wide {type: random_normal, stddev: 0.6}}
    - {name: e, type: elu, alpha: 0.5}
    - {name: c2, type: conv2d, filters: 6, kernel: 3, strides: 2, padding: same, activation: selu, kernel_initializer: *wide}
    - {name: sp, type: activation, function: softplus}
    - {name: dw, type: depthwise_conv2d, kernel: 3, padding: same, activation: hard_swish, depthwise_initializer: *wide}
    - {name: hs, type: activation, activation: hard_sigmoid}
    - {name: sep, type: separable_conv2d, filters: 6, kernel: 3, padding: same, depth_multiplier: 2, activation: elu, depthwise_initializer: *wide, pointwise_initializer: *wide}
    - {name: c3, type: conv2d, filters: 6, kernel: 1, activation: mish, kernel_initializer: *wide}
    - {name: lr, type: leaky_relu, negative_slope: 0.1}
    - {name: gap, type: global_avg_pool2d}
    - {name: out, type: dense, units: 10, activation: softmax, kernel_initializer: {type: random_normal, stddev: 3.0}}
data:
  train: {type: synthetic, size: 32, image_size: 16, seed: 1}
  val: {type: synthetic, size: 8, image_size: 16, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: sgd, lr: 0.001}
)");
  train(dir, dir + "/act.yaml", "");
  write_pixels(dir + "/x.npy", 5, 16, 16);
  predict(dir, "x.npy", "p.npy");
  for (int opset : {13, 17}) {
    INFO("opset " << opset);
    nlohmann::json j = export_and_compare(dir, "--opset " + std::to_string(opset), "x.npy", "p.npy", "--stats run/norm_stats.npy");
    CHECK(j.value("opencv", "") == "ok");
    CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  }
}

TEST_CASE("e2e export: global_max_pool2d as GlobalMaxPool and Flatten: OpenCV equals trainer predict within 1e-4", "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_global_max");
  train(dir, "quickstart.yaml",
        "--set train.batch_size=8 --set 'data.train={type: synthetic, size: 32, seed: 1}' "
        "--set 'data.val={type: synthetic, size: 8, seed: 2}' --set 'model.layers.4={name: gap, type: global_max_pool2d}'");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
}

// A squeeze-and-excitation block (EfficientNet's: SiLU, a sigmoid gate [C] multiplied into every
// pixel): the gate reshaped to [N, C, 1, 1] for ONNX's broadcasting over NCHW.
TEST_CASE("e2e export: multiply with a squeeze-and-excitation gate, a sequence's feature gate and a per-sample value (expanded by MatMul with ones): OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_multiply");
  e2e::write_file(dir + "/se.yaml", R"(name: se_export
seed: 2
model:
  input: [32, 32, 3]
  layers:
    - {name: c1, type: conv2d, filters: 8, kernel: 3, strides: 2, padding: same}
    - {name: bn, type: batchnorm}
    - {name: a1, type: silu}
    - {name: squeeze, type: global_avg_pool2d}
    - {name: e1, type: dense, units: 4}
    - {name: e1a, type: silu}
    - {name: e2, type: dense, units: 8}
    - {name: gate, type: sigmoid}
    - {name: excited, type: multiply, inputs: [a1, gate]}
    - {name: c2, type: conv2d, filters: 8, kernel: 1}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 10}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 32, seed: 1}
  val: {type: synthetic, size: 8, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: adam, lr: 0.01}
)");
  train(dir, dir + "/se.yaml", "");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
  // A sequence's feature gate [F] over [T, F] (ones[T, 1]·[N, 1, F]), and one value per sample.
  const std::string sdir = e2e::temp_dir("export_multiply_sequence");
  write_sequence_set(sdir, 13);
  e2e::write_file(sdir + "/seq.yaml", npy_model("gated_sequence", "[7, 5]", R"(    - {name: proj, type: dense, units: 8}
    - {name: pooled, type: global_avg_pool1d}
    - {name: g, type: dense, units: 8}
    - {name: gate, type: sigmoid}
    - {name: gated, type: multiply, inputs: [proj, gate]}
    - {name: one, type: dense, units: 1, inputs: [pooled]}
    - {name: scaled, type: multiply, inputs: [one, gated]}
    - {name: flat, type: flatten}
    - {name: logits, type: dense, units: 3}
    - {name: out, type: softmax}
)"));
  train(sdir, sdir + "/seq.yaml", "");
  check_opencv_agrees(sdir, "x.npy", "", "sequence: ");
}

TEST_CASE("e2e export: layer_norm on an image (NCHW: axis 1), and a sequence model (dense per position, position_embedding, "
          "layer_norm, causal self-attention, cross-attention, GELU): the ONNX model equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  {
    const std::string dir = e2e::temp_dir("export_layer_norm_image");
    train(dir, "quickstart.yaml",
          "--set train.batch_size=8 --set 'data.train={type: synthetic, size: 32, seed: 1}' "
          "--set 'data.val={type: synthetic, size: 8, seed: 2}' "
          "--set 'model.blocks.conv_bn_relu.layers.1={name: bn, type: layer_norm, epsilon: 0.01}'");
    write_pixels(dir + "/x.npy", 5, 32, 32);
    predict(dir, "x.npy", "p.npy");
    nlohmann::json j = export_and_compare(dir, "", "x.npy", "p.npy", "--stats run/norm_stats.npy", "image: ");
    CHECK(j.value("opencv", "") == "ok");
    CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  }
  // The sequence pooled for the classifier by a flatten, Keras's GlobalAveragePooling1D or GlobalMaxPooling1D.
  for (const char* pool : {"flatten", "global_avg_pool1d", "global_max_pool1d"}) {
  INFO(pool);
  const std::string dir = e2e::temp_dir("export_layer_norm_sequence");
  write_sequence_set(dir, 12);
  e2e::write_file(dir + "/seq.yaml", npy_model("sequence_export", "[7, 5]", R"(    - {name: proj0, type: dense, units: 8}
    - {name: proj, type: position_embedding, sequence_length: 10}
    - {name: ln1, type: layer_norm}
    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 4, causal: true}
    - {name: cross, type: multi_head_attention, num_heads: 3, key_dim: 2, value_dim: 3, use_bias: false, inputs: [attn, proj]}
    - {name: mlp, type: dense, units: 8}
    - {name: act, type: gelu}
    - {name: res, type: add, inputs: [proj, act]}
    - {name: ln2, type: layer_norm, center: false}
    - {name: flat, type: )" + std::string(pool) + R"(}
    - {name: logits, type: dense, units: 3}
    - {name: out, type: softmax}
)"));
  train(dir, dir + "/seq.yaml", "");
  check_opencv_agrees(dir, "x.npy", "", "sequence: ");
  }
}

TEST_CASE("e2e export: a dense layer tied to the token embedding (tie:) exports the table transposed as its kernel, and "
          "the model passes onnx.checker (OpenCV 4.6 runs no embedding)",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_tied");
  std::string ids, labels;
  for (int i = 0; i < 16 * 7; ++i) {
    const float id = float((i * 5 + i / 7) % 3);
    ids += std::string(reinterpret_cast<const char*>(&id), 4);
  }
  for (int i = 0; i < 16; ++i) labels += char(i % 3), labels += std::string(3, '\0');
  e2e::write_file(dir + "/x.npy", npy("<f4", {16, 7}, ids));
  e2e::write_file(dir + "/y.npy", npy("<i4", {16}, labels));
  e2e::write_file(dir + "/tied.yaml", npy_model("tied_export", "[7]", R"(    - {name: tok, type: embedding, input_dim: 3, output_dim: 4}
    - {name: pos, type: position_embedding}
    - {name: ln, type: layer_norm}
    - {name: head, type: dense, units: 3, tie: tok}
    - {name: flat, type: flatten}
    - {name: logits, type: dense, units: 3}
    - {name: out, type: softmax}
)"));
  train(dir, dir + "/tied.yaml", "");
  predict(dir, "x.npy", "p.npy");
  // onnx.checker and strict shape inference pass; OpenCV 4.6 cannot run it (its Gather takes
  // constant indices only, so no embedding model runs there: said, not hidden).
  nlohmann::json j = export_and_compare(dir, "", "x.npy", "p.npy", "--allow-opencv-refusal", "tied: ");
  CHECK_THAT(j.value("opencv", ""), Catch::Contains("Gather") || Catch::Equals("ok"));
  // The head's kernel initializer is the embedding table transposed, bit for bit.
  const std::string check = "cd '" + dir + "' && " + kPython + " -c 'import onnx, numpy as np; from onnx import numpy_helper as h; "
                            "m = onnx.load(\"m.onnx\"); w = {i.name: h.to_array(i) for i in m.graph.initializer}; "
                            "k = [v for n, v in w.items() if n.startswith(\"head/kernel\")]; t = w[\"tok/embeddings\"]; "
                            "assert len(k) == 1 and k[0].shape == t.T.shape and (k[0] == t.T).all(), (list(w), k); print(\"tied ok\")' "
                            ">tied.out 2>&1";
  CHECK(std::system(check.c_str()) == 0);
  INFO(e2e::read_file(dir + "/tied.out"));
  CHECK(e2e::read_file(dir + "/tied.out").find("tied ok") != std::string::npos);
}
