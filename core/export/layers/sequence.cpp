// ONNX export of the sequence layers: embedding (Cast of the float ids to int64, then Gather),
// position_embedding (Add of a constant), lstm (ONNX LSTM, time-major, with Keras' gate order i,
// f, c, o reordered to ONNX's i, o, f, c) and gru (ONNX GRU, linear_before_reset).
#include <fmt/format.h>

#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

void export_embedding(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const Value& x = ctx.input(i, 0);
  // Ranks 1 and 2 are held as the trainer holds them; a rank-3 tensor would be taken for an image.
  if (x.shape.rank() != 1)
    l.spec().fail(fmt::format("embedding layer '{}' over {} token ids cannot be exported: the export holds 3-D values as "
                              "images (NCHW), so it takes ids of shape (steps) only", l.name(), x.shape.str()));
  const LayerConfig d = l.describe();
  const std::string ids = ctx.fresh(l.name() + "/ids");
  attr_int(ctx.add_node("Cast", {x.name}, {ids}), "to", onnx::TensorProto::INT64);
  const std::string table = ctx.add_initializer(ctx.param_entry(i, "embeddings").name,
                                                {d.integer("input_dim"), d.integer("output_dim")}, ctx.param(i, "embeddings"));
  attr_int(ctx.add_node("Gather", {table, ids}, {ctx.output_name(i)}), "axis", 0);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

// Keras' LSTM gate blocks [i | f | c | o] along the 4U axis, as ONNX's [i | o | f | c]: ONNX block g
// comes from Keras block kKerasGate[g]. Keras's GRU blocks [z | r | h] are ONNX's order already.
constexpr int kKerasGate[4] = {0, 3, 1, 2};
constexpr int kGruGate[3] = {0, 1, 2};

// A trainer matrix [rows, G·U] (kernel [F, G·U] or recurrent_kernel [U, G·U]) as ONNX [1, G·U, rows],
// ONNX gate block g taken from the trainer's block order[g].
std::vector<float> gates_transposed(const std::vector<float>& m, int64_t rows, int64_t u, int gates = 4,
                                    const int* order = kKerasGate) {
  std::vector<float> out(size_t(gates * u * rows));
  for (int g = 0; g < gates; ++g)
    for (int64_t j = 0; j < u; ++j)
      for (int64_t r = 0; r < rows; ++r)
        out[size_t((g * u + j) * rows + r)] = m[size_t(r * gates * u + order[g] * u + j)];
  return out;
}

// The recurrent node's output as the layer's: every step's Y [T, 1, N, U] as [N, T, U], or the
// last state [N, U]: Y_h [1, N, U] (lstm), or Y's last step sliced (gru: OpenCV 4.6's GRU makes no
// Y_h; yh empty).
void recurrent_output(ExportContext& ctx, size_t i, const std::string& y, const std::string& yh, int64_t t, int64_t u,
                      bool sequences) {
  const std::string name = ctx.node(i).layer->name();
  if (sequences) {  // Y [T, 1, N, U] -> [N, T, 1, U] -> [N, T, U]
    const std::string nt = ctx.fresh(name + "/batch_major");
    attr_ints(ctx.add_node("Transpose", {y}, {nt}), "perm", {2, 0, 1, 3});
    ctx.add_node("Reshape", {nt, ctx.add_int64s(name + "/shape", {-1, t, u})}, {ctx.output_name(i)});
  } else {  // Y_h [1, N, U] (or Y [T, 1, N, U]'s last step [1, 1, N, U]) -> [N, U]
    std::string last = yh;
    if (last.empty()) {
      last = ctx.fresh(name + "/last_step");
      ctx.add_node("Slice", {y, ctx.add_int64s(name + "/last_start", {t - 1}), ctx.add_int64s(name + "/last_end", {t}),
                             ctx.add_int64s(name + "/time_axis", {0})},
                   {last});
    }
    ctx.add_node("Reshape", {last, ctx.add_int64s(name + "/shape", {-1, u})}, {ctx.output_name(i)});
  }
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_lstm(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);  // [N, T, F]
  const int64_t t = x.shape[0], f = x.shape[1], u = d.integer("units");
  const std::string name = l.name();
  const std::string doc = "Keras gate order i, f, c, o reordered to ONNX's i, o, f, c";
  const std::string w = ctx.add_initializer(ctx.param_entry(i, "kernel").name, {1, 4 * u, f},
                                            gates_transposed(ctx.param(i, "kernel"), f, u),
                                            "ONNX LSTM W: trainer kernel [F, 4U] transposed; " + doc);
  const std::string r = ctx.add_initializer(ctx.param_entry(i, "recurrent_kernel").name, {1, 4 * u, u},
                                            gates_transposed(ctx.param(i, "recurrent_kernel"), u, u),
                                            "ONNX LSTM R: trainer recurrent_kernel [U, 4U] transposed; " + doc);
  std::vector<std::string> in{ctx.fresh(name + "/time_major"), w, r};
  attr_ints(ctx.add_node("Transpose", {x.name}, {in[0]}), "perm", {1, 0, 2});  // [T, N, F]
  if (d.flag("use_bias")) {
    const std::vector<float> b = ctx.param(i, "bias");
    std::vector<float> wb(size_t(8 * u), 0.0f);  // [Wb | Rb]: the trainer's bias as Wb, Rb zero
    for (int g = 0; g < 4; ++g)
      for (int64_t j = 0; j < u; ++j) wb[size_t(g * u + j)] = b[size_t(kKerasGate[g] * u + j)];
    in.push_back(ctx.add_initializer(ctx.param_entry(i, "bias").name, {1, 8 * u}, wb,
                                     "ONNX LSTM B = [Wb | Rb]: trainer bias as Wb, Rb zeros; " + doc));
  }
  const std::string y = ctx.fresh(name + "/Y"), yh = ctx.fresh(name + "/Y_h");
  onnx::NodeProto* n = ctx.add_node("LSTM", in, {y, yh});
  attr_int(n, "hidden_size", u);
  if (d.text("recurrent_activation") != "sigmoid" || d.text("activation") != "tanh")
    l.spec().fail(fmt::format("lstm layer '{}': only the activations sigmoid (gates) and tanh have an ONNX export", name));
  attr_strings(n, "activations", {"Sigmoid", "Tanh", "Tanh"});
  recurrent_output(ctx, i, y, yh, t, u, d.flag("return_sequences"));
}

// gru: ONNX GRU with linear_before_reset = 1 (Keras's reset_after), time-major; W, R transposed
// (the gate order z, r, h is ONNX's), B = [Wb | Rb] the trainer's two bias rows.
void export_gru(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);  // [N, T, F]
  const int64_t t = x.shape[0], f = x.shape[1], u = d.integer("units");
  const std::string name = l.name();
  const std::string w = ctx.add_initializer(ctx.param_entry(i, "kernel").name, {1, 3 * u, f},
                                            gates_transposed(ctx.param(i, "kernel"), f, u, 3, kGruGate),
                                            "ONNX GRU W: trainer kernel [F, 3U] transposed (gates z, r, h)");
  const std::string r = ctx.add_initializer(ctx.param_entry(i, "recurrent_kernel").name, {1, 3 * u, u},
                                            gates_transposed(ctx.param(i, "recurrent_kernel"), u, u, 3, kGruGate),
                                            "ONNX GRU R: trainer recurrent_kernel [U, 3U] transposed (gates z, r, h)");
  std::vector<std::string> in{ctx.fresh(name + "/time_major"), w, r};
  attr_ints(ctx.add_node("Transpose", {x.name}, {in[0]}), "perm", {1, 0, 2});  // [T, N, F]
  if (d.flag("use_bias"))
    in.push_back(ctx.add_initializer(ctx.param_entry(i, "bias").name, {1, 6 * u}, ctx.param(i, "bias"),
                                     "ONNX GRU B = [Wb | Rb]: the trainer's bias rows (input, recurrent)"));
  const std::string y = ctx.fresh(name + "/Y");
  onnx::NodeProto* n = ctx.add_node("GRU", in, {y});
  attr_int(n, "hidden_size", u);
  attr_int(n, "linear_before_reset", 1);
  recurrent_output(ctx, i, y, "", t, u, d.flag("return_sequences"));
}

// position_embedding: Add of the table's first T rows, a constant [T, D] broadcast over the batch.
void export_position_embedding(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const int64_t T = x.shape[0], D = x.shape[1];
  std::vector<float> table = ctx.param(i, "embeddings");
  table.resize(size_t(T * D));  // rows [0, T) of [sequence_length, D]
  const std::string rows = ctx.add_initializer(ctx.param_entry(i, "embeddings").name, {T, D}, table,
                                               "the first T rows of the position table");
  ctx.add_node("Add", {x.name, rows}, {ctx.output_name(i)});
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter embedding({"embedding"}, export_embedding);
const RegisterExporter position_embedding({"position_embedding"}, export_position_embedding);
const RegisterExporter lstm({"lstm"}, export_lstm);
const RegisterExporter gru({"gru"}, export_gru);

}  // namespace
}  // namespace trainer::onnx_export
