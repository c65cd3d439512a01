// `trainer export --onnx` of the layers that ONNX has no node of the same shape for (conv1d and the
// 1-D pools over one row, reshape between layouts, GRU, bidirectional recurrent layers, ConvTranspose's pads), checked as
// export_test.cpp's models are: OpenCV runs the ONNX model to trainer predict's probabilities within 1e-4.
#include "export_util.h"

using namespace e2e_export;

// conv1d (valid; same with a stride; causal with a dilation), max_pool1d and avg_pool1d ('same':
// the average excludes the padding) as one-row Conv and pooling nodes between Transposes, and
// zero_pad1d, up_sampling1d and cropping1d as Pad, Resize and Slice over the same one row;
// wide logits, so that a wrong pad or weight order moves the probabilities by more than 1e-4.
TEST_CASE("e2e export: conv1d (valid, same with strides, causal with dilation), max_pool1d, avg_pool1d, zero_pad1d, up_sampling1d and cropping1d over one row: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_conv1d");
  write_sequence_set(dir, 13);
  e2e::write_file(dir + "/conv1d.yaml", npy_model("conv1d_sequence", "[7, 5]", R"(    - {name: a, type: conv1d, filters: 6, kernel: 3, padding: causal, dilation: 2, activation: tanh}
    - {name: mp, type: max_pool1d, pool: 2, strides: 1, padding: same}
    - {name: b, type: conv1d, filters: 6, kernel: 2, strides: 2, padding: same, activation: relu}
    - {name: c, type: conv1d, filters: 4, kernel: 2, use_bias: false}
    - {name: ap, type: avg_pool1d, pool: 2, padding: same}
    - {name: pad, type: zero_pad1d, padding: [2, 1]}
    - {name: up, type: up_sampling1d, size: 3}
    - {name: crop, type: cropping1d, cropping: [1, 3]}
    - {name: flat, type: flatten}
    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
  train(dir, dir + "/conv1d.yaml", "");
  check_opencv_agrees(dir, "x.npy", "", "sequence: ");
}

// reshape between a flat vector, an image (NCHW in ONNX: taken to NHWC and back) and a sequence;
// up_sampling2d (Resize, nearest; linear with half-pixel coordinates) and cropping2d (Slice) between them.
TEST_CASE("e2e export: reshape (flat -> image -> sequence) as Reshape with Transposes around images, up_sampling2d as Resize (nearest and bilinear), cropping2d as Slice: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_reshape");
  write_sequence_set(dir, 17);
  e2e::write_file(dir + "/reshape.yaml", npy_model("reshape_export", "[7, 5]", R"(    - {name: flat, type: reshape, target_shape: [-1]}
    - {name: d, type: dense, units: 32, activation: tanh}
    - {name: img, type: reshape, target_shape: [4, 4, 2]}
    - {name: c, type: conv2d, filters: 3, kernel: 2, activation: relu}
    - {name: up, type: up_sampling2d, size: [2, 2]}
    - {name: crop, type: cropping2d, cropping: [[1, 2], [0, 0]]}
    - {name: up2, type: up_sampling2d, size: [2, 3], interpolation: bilinear}
    - {name: seq, type: reshape, target_shape: [-1, 3]}
    - {name: c1, type: conv1d, filters: 4, kernel: 2}
    - {name: out_flat, type: flatten}
    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
  train(dir, dir + "/reshape.yaml", "");
  check_opencv_agrees(dir, "x.npy", "", "sequence: ");
}

// gru: ONNX GRU (linear_before_reset, Keras's reset_after) over every step, then over the last.
TEST_CASE("e2e export: gru layers (return_sequences, then the last step) as ONNX GRU with linear_before_reset: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_gru");
  write_sequence_set(dir, 19);
  e2e::write_file(dir + "/gru.yaml", npy_model("gru_export", "[7, 5]", R"(    - {name: g1, type: gru, units: 6, return_sequences: true}
    - {name: g2, type: gru, units: 5, bias_initializer: {type: random_normal, stddev: 0.5}}
    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
  train(dir, dir + "/gru.yaml", "");
  predict(dir, "x.npy", "p.npy");
  nlohmann::json j = export_and_compare(dir, "", "x.npy", "p.npy", "", "sequence: ");
  CHECK(j.value("opencv", "") == "ok");
  CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  // OpenCV 4.6 runs every GRU as linear_before_reset = 1 whatever the attribute: checked on the model.
  CHECK(j["gru_linear_before_reset"] == nlohmann::json::array({1, 1}));
}

// bidirectional: one ONNX LSTM or GRU of direction "bidirectional" per layer, its halves merged
// (concat, mul, ave, sum) over every step or from each half's last step (the backward half's is
// step 0); wide logits, so that a half taken from the wrong step or direction moves the
// probabilities by more than 1e-4.
TEST_CASE("e2e export: bidirectional lstm, gru and simple_rnn (every merge mode, every step and the last) as ONNX LSTM / GRU of direction bidirectional, repeat_vector as Resize: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const char* models[][2] = {
      {"steps", R"(    - {name: b1, type: bidirectional, layer: {type: lstm, units: 4, return_sequences: true}}
    - {name: b2, type: bidirectional, layer: {type: gru, units: 3, return_sequences: true}, merge_mode: mul}
    - {name: b3, type: bidirectional, layer: {type: lstm, units: 3, return_sequences: true, use_bias: false}, merge_mode: ave}
    - {name: b5, type: bidirectional, layer: {type: simple_rnn, units: 4, return_sequences: true, use_bias: false}, merge_mode: concat}
    - {name: b4, type: bidirectional, layer: {type: gru, units: 5, name: enc}, merge_mode: sum}
)"},
      {"last", R"(    - {name: b1, type: bidirectional, layer: {type: lstm, units: 4, bias_initializer: {type: random_normal, stddev: 0.5}}}
)"},
      {"simple_rnn_last", R"(    - {name: b1, type: bidirectional, layer: {type: simple_rnn, units: 4, bias_initializer: {type: random_normal, stddev: 0.5}}, merge_mode: ave}
)"},
      // a sequence-to-sequence autoencoder's shape: the summary repeated (repeat_vector: Resize of one step)
      {"repeat", R"(    - {name: b1, type: bidirectional, layer: {type: gru, units: 3}}
    - {name: rep, type: repeat_vector, n: 4}
    - {name: dec, type: lstm, units: 3, return_sequences: true}
    - {name: flat, type: flatten}
)"}};
  for (const auto& m : models) {
    INFO(m[0]);
    const std::string sub = e2e::temp_dir(std::string("export_bidirectional_") + m[0]);
    write_sequence_set(sub, 23);
    e2e::write_file(sub + "/bi.yaml", npy_model(std::string("bidirectional_") + m[0], "[7, 5]", std::string(m[1]) +
                                                R"(    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
    train(sub, sub + "/bi.yaml", "");
    check_opencv_agrees(sub, "x.npy", "", "sequence: ");
  }
}

// conv2d_transpose as ConvTranspose: 'same' at stride 2 (pads from the convolution it transposes,
// the smaller half before), valid with output_padding, and a kernel smaller than its stride (the
// rows no window reaches: output_padding); wide weights, so that a wrong pad, flip or weight order
// moves the probabilities by more than 1e-4.
TEST_CASE("e2e export: conv2d_transpose ('same' at stride 2, valid with output_padding, a kernel below its stride) as ConvTranspose: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_conv_transpose");
  e2e::write_file(dir + "/up.yaml", R"(name: conv_transpose_export
seed: 4
model:
  input: [12, 12, 3]
  layers:
    - {name: down, type: conv2d, filters: 6, kernel: 3, strides: 2, padding: same, activation: relu}
    - {name: up1, type: conv2d_transpose, filters: 5, kernel: 4, strides: 2, padding: same, activation: tanh, kernel_initializer: &wide {type: random_normal, stddev: 0.5}}
    - {name: up2, type: conv2d_transpose, filters: 4, kernel: [3, 2], strides: 2, output_padding: [1, 0], kernel_initializer: *wide}
    - {name: up3, type: conv2d_transpose, filters: 3, kernel: 1, strides: [2, 3], bias_initializer: {type: random_normal, stddev: 0.5}}
    - {name: pool, type: max_pool2d, pool: 4}
    - {name: flat, type: flatten}
    - {name: out, type: dense, units: 10, activation: softmax, kernel_initializer: {type: random_normal, stddev: 0.5}}
data:
  train: {type: synthetic, size: 32, image_size: 12, seed: 1}
  val: {type: synthetic, size: 8, image_size: 12, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: sgd, lr: 0.001}
)");
  train(dir, dir + "/up.yaml", "");
  write_pixels(dir + "/x.npy", 5, 12, 12);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
}

// subtract (Sub), average (Sum, Div), maximum (Max) and minimum (Min) over conv branches of an
// image and dense branches of a vector; prelu one slope per channel (PRelu [C, 1, 1]), Keras's
// default of a slope per position (Relu − Relu(−x)·alpha in NCHW order), a slope per feature of a
// vector, and one slope over a sequence.
TEST_CASE("e2e export: subtract, average, maximum, minimum and prelu (per channel, per position, per feature, one slope) on images, vectors and sequences: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_merge_prelu");
  e2e::write_file(dir + "/m.yaml", R"(name: merge_prelu_export
seed: 3
model:
  input: [32, 32, 3]
  layers:
    - {name: a, type: conv2d, filters: 4, kernel: 3, padding: same}
    - {name: pa, type: prelu, shared_axes: [1, 2], alpha_initializer: {type: random_uniform, minval: -0.5, maxval: 0.9}}
    - {name: b, type: conv2d, filters: 4, kernel: 1, inputs: [input]}
    - {name: pb, type: prelu, alpha_initializer: {type: random_uniform, minval: 0.0, maxval: 0.6}}
    - {name: c, type: conv2d, filters: 4, kernel: 3, padding: same, inputs: [input]}
    - {name: pc, type: prelu, shared_axes: [3], alpha_initializer: {type: random_uniform, minval: 0.0, maxval: 0.6}}
    - {name: diff, type: subtract, inputs: [pa, pb]}
    - {name: mean, type: average, inputs: [diff, pb, pc]}
    - {name: hi, type: maximum, inputs: [pa, pb, pc]}
    - {name: lo, type: minimum, inputs: [mean, hi]}
    - {name: gap, type: global_avg_pool2d}
    - {name: d1, type: dense, units: 6}
    - {name: d2, type: dense, units: 6, inputs: [gap]}
    - {name: p1, type: prelu, alpha_initializer: {type: constant, value: 0.2}, inputs: [d1]}
    - {name: dmax, type: maximum, inputs: [p1, d2]}
    - {name: dsub, type: subtract, inputs: [d2, dmax]}
    - {name: logits, type: dense, units: 10, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 32, seed: 1}
  val: {type: synthetic, size: 8, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: adam, lr: 0.01}
)");
  train(dir, dir + "/m.yaml", "");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
  // A sequence: the merges over dense branches per position, prelu with one slope.
  const std::string sdir = e2e::temp_dir("export_merge_prelu_sequence");
  write_sequence_set(sdir, 19);
  e2e::write_file(sdir + "/seq.yaml", npy_model("merge_prelu_sequence", "[7, 5]", R"(    - {name: p, type: dense, units: 6}
    - {name: q, type: dense, units: 6, inputs: [input]}
    - {name: pr, type: prelu, shared_axes: [1, 2], alpha_initializer: {type: constant, value: 0.3}}
    - {name: s, type: subtract, inputs: [p, pr]}
    - {name: m, type: average, inputs: [s, p, pr]}
    - {name: hi, type: maximum, inputs: [m, q]}
    - {name: lo, type: minimum, inputs: [hi, s]}
    - {name: flat, type: flatten}
    - {name: logits, type: dense, units: 3}
    - {name: out, type: softmax}
)"));
  train(sdir, sdir + "/seq.yaml", "");
  check_opencv_agrees(sdir, "x.npy", "", "sequence: ");
}

// group_norm as Reshape, InstanceNormalization and Reshape, gamma and beta as BatchNormalization on
// an image, MatMul by diag(gamma) and Add on a vector and a sequence (transposed so a group is a row).
TEST_CASE("e2e export: group_norm (image, vector, sequence, with and without gamma/beta) as InstanceNormalization over each group: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_group_norm");
  e2e::write_file(dir + "/gn.yaml", R"(name: group_norm_export
seed: 4
model:
  input: [32, 32, 3]
  layers:
    - {name: c1, type: conv2d, filters: 8, kernel: 3, strides: 2, padding: same}
    - {name: gn1, type: group_norm, groups: 4, gamma_initializer: {type: random_uniform, minval: 0.5, maxval: 1.5}, beta_initializer: {type: random_normal, stddev: 0.5}}
    - {name: a1, type: silu}
    - {name: c2, type: conv2d, filters: 6, kernel: 3, strides: 2}
    - {name: gn2, type: group_norm, groups: 6, center: false, scale: false}
    - {name: gap, type: global_avg_pool2d}
    - {name: d1, type: dense, units: 8}
    - {name: gn3, type: group_norm, groups: 2, beta_initializer: {type: random_normal, stddev: 0.5}}
    - {name: dense, type: dense, units: 10, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 32, seed: 1}
  val: {type: synthetic, size: 8, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: adam, lr: 0.01}
)");
  train(dir, dir + "/gn.yaml", "");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
  const std::string sdir = e2e::temp_dir("export_group_norm_sequence");
  write_sequence_set(sdir, 23);
  e2e::write_file(sdir + "/seq.yaml", npy_model("group_norm_sequence", "[7, 5]", R"(    - {name: p, type: dense, units: 6}
    - {name: gn, type: group_norm, groups: 3, gamma_initializer: {type: random_uniform, minval: 0.5, maxval: 1.5}, beta_initializer: {type: random_normal, stddev: 0.5}}
    - {name: t, type: tanh}
    - {name: gn2, type: group_norm, groups: 2, scale: false}
    - {name: flat, type: flatten}
    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
  train(sdir, sdir + "/seq.yaml", "");
  check_opencv_agrees(sdir, "x.npy", "", "sequence: ");
}

// simple_rnn (tanh) as an ONNX GRU held open (z closed by a bias of -100, r open by +100): every
// step with a bias, then the last step without one.
TEST_CASE("e2e export: simple_rnn layers (every step with a bias, the last step without) as ONNX GRU held open: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_simple_rnn");
  write_sequence_set(dir, 29);
  e2e::write_file(dir + "/rnn.yaml", npy_model("simple_rnn_export", "[7, 5]", R"(    - {name: r1, type: simple_rnn, units: 6, return_sequences: true, bias_initializer: {type: random_normal, stddev: 0.5}}
    - {name: r2, type: simple_rnn, units: 4, use_bias: false}
    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
  train(dir, dir + "/rnn.yaml", "");
  check_opencv_agrees(dir, "x.npy", "", "sequence: ");
}

// rescaling as the channel affine (BatchNormalization on an image, MatMul by diag(scale) and Add on a
// vector): one value (Keras's 1/255) and one per channel.
TEST_CASE("e2e export: rescaling (one value on an image, one per channel on an image and a vector): OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_rescaling");
  e2e::write_file(dir + "/r.yaml", R"(name: rescaling_export
seed: 5
model:
  input: [32, 32, 3]
  layers:
    - {name: r0, type: rescaling, scale: 3.0, offset: -0.5}
    - {name: r1, type: rescaling, scale: [0.5, -1.5, 2.0], offset: [0.1, 0.2, -0.3]}
    - {name: c1, type: conv2d, filters: 6, kernel: 3, strides: 2, padding: same, activation: relu}
    - {name: gap, type: global_avg_pool2d}
    - {name: r2, type: rescaling, scale: [1, 2, 3, -1, -2, 0.5], offset: 0.25}
    - {name: dense, type: dense, units: 10, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 32, seed: 1}
  val: {type: synthetic, size: 8, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: adam, lr: 0.01}
)");
  train(dir, dir + "/r.yaml", "");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
}

// permute as one Transpose: on an image (held as NCHW: the perm mapped through it) and on a sequence.
TEST_CASE("e2e export: permute (an image's axes, a sequence's steps and features) as Transpose: OpenCV equals trainer predict within 1e-4",
          "[export]") {
  if (skip_without_python_deps()) return;
  const std::string dir = e2e::temp_dir("export_permute");
  e2e::write_file(dir + "/p.yaml", R"(name: permute_export
seed: 6
model:
  input: [32, 32, 3]
  layers:
    - {name: c1, type: conv2d, filters: 4, kernel: 3, strides: [2, 4], padding: same, activation: relu}
    - {name: p1, type: permute, dims: [2, 1, 3]}
    - {name: c2, type: conv2d, filters: 5, kernel: [3, 2], strides: 2}
    - {name: p2, type: permute, dims: [3, 1, 2]}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 10, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 32, seed: 1}
  val: {type: synthetic, size: 8, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: adam, lr: 0.01}
)");
  train(dir, dir + "/p.yaml", "");
  write_pixels(dir + "/x.npy", 5, 32, 32);
  check_opencv_agrees(dir, "x.npy", "--stats run/norm_stats.npy");
  const std::string sdir = e2e::temp_dir("export_permute_sequence");
  write_sequence_set(sdir, 31);
  e2e::write_file(sdir + "/seq.yaml", npy_model("permute_sequence", "[7, 5]", R"(    - {name: p, type: permute, dims: [2, 1]}
    - {name: d, type: dense, units: 4, activation: tanh}
    - {name: q, type: permute, dims: [2, 1]}
    - {name: flat, type: flatten}
    - {name: logits, type: dense, units: 3, kernel_initializer: {type: random_normal, stddev: 2.0}}
    - {name: out, type: softmax}
)"));
  train(sdir, sdir + "/seq.yaml", "");
  check_opencv_agrees(sdir, "x.npy", "", "sequence: ");
}
