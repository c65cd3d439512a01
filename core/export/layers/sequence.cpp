// ONNX export of the sequence layers: embedding (Cast of the float ids to int64, then Gather),
// position_embedding (Add of a constant), lstm (ONNX LSTM, time-major, with Keras' gate order i,
// f, c, o reordered to ONNX's i, o, f, c), gru (ONNX GRU, linear_before_reset), simple_rnn (a GRU
// whose gates are held open) and bidirectional (an lstm or gru with direction "bidirectional", the
// halves merged).
#include <fmt/format.h>

#include <algorithm>

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

// One direction's ONNX weights of a recurrent layer (lstm: gates reordered; gru: z, r, h as they
// are) from node i's parameters under `prefix` ("", or a bidirectional layer's "forward_lstm/"):
// W [G·U, F], R [G·U, U] and B = [Wb | Rb] [2·G·U] (lstm: its bias as Wb, Rb zeros; gru: its two
// bias rows), flat; b empty without bias.
struct RnnWeights {
  std::vector<float> w, r, b;
};
RnnWeights rnn_weights(const ExportContext& ctx, size_t i, const std::string& prefix, bool lstm, int64_t f, int64_t u,
                       bool bias) {
  const int gates = lstm ? 4 : 3;
  const int* order = lstm ? kKerasGate : kGruGate;
  RnnWeights out{gates_transposed(ctx.param(i, prefix + "kernel"), f, u, gates, order),
                 gates_transposed(ctx.param(i, prefix + "recurrent_kernel"), u, u, gates, order), {}};
  if (!bias) return out;
  const std::vector<float> b = ctx.param(i, prefix + "bias");
  if (!lstm) {
    out.b = b;
    return out;
  }
  out.b.assign(size_t(8 * u), 0.0f);
  for (int g = 0; g < 4; ++g)
    for (int64_t j = 0; j < u; ++j) out.b[size_t(g * u + j)] = b[size_t(kKerasGate[g] * u + j)];
  return out;
}

// Node i's input [N, T, F] as time-major [T, N, F].
std::string time_major(ExportContext& ctx, size_t i) {
  const std::string xt = ctx.fresh(ctx.node(i).layer->name() + "/time_major");
  attr_ints(ctx.add_node("Transpose", {ctx.input(i, 0).name}, {xt}), "perm", {1, 0, 2});
  return xt;
}

// The ONNX LSTM or GRU node over `xt` [T, N, F] with the directions' weights (one: forward; two:
// bidirectional), named `names` (W, R, B). Returns Y [T, directions, N, U] (and Y_h [directions,
// N, U] for an lstm: yh).
std::string rnn_node(ExportContext& ctx, size_t i, const std::string& xt, bool lstm, const std::vector<RnnWeights>& dirs,
                     int64_t f, int64_t u, const std::vector<std::string>& names, std::string* yh = nullptr) {
  const Layer& l = *ctx.node(i).layer;
  const std::string name = l.name(), op = lstm ? "LSTM" : "GRU";
  const int64_t g = lstm ? 4 : 3, nd = int64_t(dirs.size());
  const std::string how = lstm ? "Keras gate order i, f, c, o reordered to ONNX's i, o, f, c" : "gates z, r, h";
  const std::string dirs_doc = nd == 2 ? "; the forward half, then the backward half" : "";
  std::vector<float> w, r, b;
  for (const RnnWeights& k : dirs) {
    w.insert(w.end(), k.w.begin(), k.w.end());
    r.insert(r.end(), k.r.begin(), k.r.end());
    b.insert(b.end(), k.b.begin(), k.b.end());
  }
  std::vector<std::string> in{xt,
                              ctx.add_initializer(names[0], {nd, g * u, f}, w,
                                                  "ONNX " + op + " W: trainer kernel [F, " + std::to_string(g) + "U] transposed; " + how + dirs_doc),
                              ctx.add_initializer(names[1], {nd, g * u, u}, r,
                                                  "ONNX " + op + " R: trainer recurrent_kernel [U, " + std::to_string(g) + "U] transposed; " + how + dirs_doc)};
  if (!b.empty())
    in.push_back(ctx.add_initializer(names[2], {nd, 2 * g * u}, b,
                                     lstm ? "ONNX LSTM B = [Wb | Rb]: trainer bias as Wb, Rb zeros; " + how + dirs_doc
                                          : "ONNX GRU B = [Wb | Rb]: the trainer's bias rows (input, recurrent)" + dirs_doc));
  const std::string y = ctx.fresh(name + "/Y");
  std::vector<std::string> outs{y};
  if (yh) outs.push_back(*yh = ctx.fresh(name + "/Y_h"));
  onnx::NodeProto* n = ctx.add_node(op, in, outs);
  attr_int(n, "hidden_size", u);
  if (nd == 2) attr_string(n, "direction", "bidirectional");
  // Keras's activations are ONNX's defaults; said where there is one direction only: OpenCV 4.6
  // refuses a list of six (a bidirectional node's) and reads the defaults right.
  if (lstm && nd == 1) attr_strings(n, "activations", {"Sigmoid", "Tanh", "Tanh"});
  if (!lstm) attr_int(n, "linear_before_reset", 1);
  return y;
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

// Keras's own activations (sigmoid gates, tanh) are the ONNX nodes' defaults; others are refused.
void check_activations(const ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  if (d.text("recurrent_activation") != "sigmoid" || d.text("activation") != "tanh")
    l.spec().fail(fmt::format("layer '{}': only the activations sigmoid (gates) and tanh have an ONNX export", l.name()));
}

void export_recurrent(ExportContext& ctx, size_t i, bool lstm) {
  check_activations(ctx, i);
  const LayerConfig d = ctx.node(i).layer->describe();
  const Value& x = ctx.input(i, 0);  // [N, T, F]
  const int64_t t = x.shape[0], f = x.shape[1], u = d.integer("units");
  const std::vector<RnnWeights> dirs{rnn_weights(ctx, i, "", lstm, f, u, d.flag("use_bias"))};
  const std::vector<std::string> names{ctx.param_entry(i, "kernel").name, ctx.param_entry(i, "recurrent_kernel").name,
                                       d.flag("use_bias") ? ctx.param_entry(i, "bias").name : ""};
  std::string yh;
  const std::string y = rnn_node(ctx, i, time_major(ctx, i), lstm, dirs, f, u, names, lstm ? &yh : nullptr);
  recurrent_output(ctx, i, y, yh, t, u, d.flag("return_sequences"));
}

void export_lstm(ExportContext& ctx, size_t i) { export_recurrent(ctx, i, true); }
// gru: ONNX GRU with linear_before_reset = 1 (Keras's reset_after), time-major.
void export_gru(ExportContext& ctx, size_t i) { export_recurrent(ctx, i, false); }

// simple_rnn (tanh) as an ONNX GRU whose gates are held open: OpenCV 4.6 has no RNN node. With
// z's and r's weights 0 and their input biases -100 and +100, z = σ(-100) (3.7e-44: h_t = hh to
// float precision) and r = σ(100) = 1, so hh = tanh(x·W + b + h_{t-1}·R) is SimpleRNN's h_t
// (linear_before_reset: r multiplies h_{t-1}·R). relu, sigmoid and linear have no such form: refused.
// The weights of node i's simple_rnn parameters under `prefix` as such a GRU's (rnn_weights' layout).
RnnWeights held_open_gru(const ExportContext& ctx, size_t i, const std::string& prefix, int64_t f, int64_t u, bool bias) {
  const Layer& l = *ctx.node(i).layer;
  if (l.describe().text("activation") != "tanh")
    l.spec().fail(fmt::format("layer '{}': a simple_rnn has an ONNX export (a GRU held open) with activation tanh only, not {}",
                              l.name(), l.describe().text("activation")));
  const std::vector<float> w = ctx.param(i, prefix + "kernel"), r = ctx.param(i, prefix + "recurrent_kernel");
  const std::vector<float> b = bias ? ctx.param(i, prefix + "bias") : std::vector<float>(size_t(u), 0.0f);
  RnnWeights g{std::vector<float>(size_t(3 * u * f), 0.0f), std::vector<float>(size_t(3 * u * u), 0.0f),
               std::vector<float>(size_t(6 * u), 0.0f)};
  for (int64_t j = 0; j < u; ++j) {
    for (int64_t k = 0; k < f; ++k) g.w[size_t((2 * u + j) * f + k)] = w[size_t(k * u + j)];  // h block: Wᵀ
    for (int64_t k = 0; k < u; ++k) g.r[size_t((2 * u + j) * u + k)] = r[size_t(k * u + j)];  // h block: Rᵀ
    g.b[size_t(j)] = -100.0f;     // z closed: h_t = hh
    g.b[size_t(u + j)] = 100.0f;  // r open: r·(h_{t-1}·R) = h_{t-1}·R
    g.b[size_t(2 * u + j)] = b[size_t(j)];
  }
  return g;
}

void export_simple_rnn(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);  // [N, T, F]
  const int64_t t = x.shape[0], f = x.shape[1], u = d.integer("units");
  const bool bias = d.flag("use_bias");
  const RnnWeights g = held_open_gru(ctx, i, "", f, u, bias);
  const std::vector<std::string> names{ctx.param_entry(i, "kernel").name, ctx.param_entry(i, "recurrent_kernel").name,
                                       bias ? ctx.param_entry(i, "bias").name : l.name() + "/gate_biases"};
  const std::string y = rnn_node(ctx, i, time_major(ctx, i), false, {g}, f, u, names);
  recurrent_output(ctx, i, y, "", t, u, d.flag("return_sequences"));
}

// bidirectional (an lstm, gru or simple_rnn both ways): one ONNX node of direction "bidirectional" (a gru or simple_rnn: two,
// below), whose Y [T, 2, N, U] holds the backward half in x's step order, as Keras's merge takes it. Every step:
// Y as [N, T, 2, U]; the last state: each half's last step, Y[T - 1, 0] and Y[0, 1], as [1, N, 2, U].
// concat: the two halves side by side ([.., 2U]); sum, mul: Add, Mul of the halves; ave: Add, then
// Mul by 0.5.
void export_bidirectional(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const bool simple = l.describe().text("layer") == "simple_rnn";  // two held-open GRUs, as a gru's halves
  if (!simple) check_activations(ctx, i);
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);
  const int64_t t = x.shape[0], f = x.shape[1], u = d.integer("units");
  const bool lstm = d.text("layer") == "lstm", bias = d.flag("use_bias"), seq = d.flag("return_sequences");
  const std::string name = l.name(), merge = d.text("merge_mode");
  std::vector<RnnWeights> dirs;
  for (const char* half : {"forward_", "backward_"})
    dirs.push_back(simple ? held_open_gru(ctx, i, half + d.text("layer_name") + "/", f, u, bias)
                          : rnn_weights(ctx, i, half + d.text("layer_name") + "/", lstm, f, u, bias));
  const std::string xt = time_major(ctx, i);
  std::string y;
  if (lstm) {
    y = rnn_node(ctx, i, xt, true, dirs, f, u, {name + "/W", name + "/R", name + "/B"});
  } else {
    // OpenCV 4.6 cannot run a bidirectional GRU (its GEMM asserts on the second direction's
    // shapes): the same Y from two forward GRUs, the second over the steps reversed and its output
    // reversed back, concatenated along the direction axis. A reversal is a Split into the steps
    // and a Concat of them backwards (OpenCV 4.6's Gather takes one index only).
    const std::string ones = ctx.add_int64s(name + "/one_step_each", std::vector<int64_t>(static_cast<size_t>(t), 1));
    const auto reverse = [&](const std::string& v, const std::string& out) {
      std::vector<std::string> steps;
      for (int64_t s = 0; s < t; ++s) steps.push_back(ctx.fresh(out + "/step"));
      attr_int(ctx.add_node("Split", {v, ones}, steps), "axis", 0);
      std::reverse(steps.begin(), steps.end());
      attr_int(ctx.add_node("Concat", steps, {out}), "axis", 0);
      return out;
    };
    std::vector<std::string> halves;
    for (size_t k = 0; k < 2; ++k) {
      const std::string pre = (k ? "backward_" : "forward_") + d.text("layer_name") + "/";
      const std::vector<std::string> names{ctx.param_entry(i, pre + "kernel").name, ctx.param_entry(i, pre + "recurrent_kernel").name,
                                           bias ? ctx.param_entry(i, pre + "bias").name : name + "/" + pre + "gate_biases"};
      const std::string in = k ? reverse(xt, ctx.fresh(name + "/time_major_reversed")) : xt;
      const std::string yk = rnn_node(ctx, i, in, false, {dirs[k]}, f, u, names);
      halves.push_back(k ? reverse(yk, ctx.fresh(name + "/Y_backward")) : yk);
    }
    y = ctx.fresh(name + "/Y_both");
    attr_int(ctx.add_node("Concat", halves, {y}), "axis", 1);
  }
  std::string both = ctx.fresh(name + "/both");  // [N, T, 2, U] or [1, N, 2, U]
  if (seq) {
    attr_ints(ctx.add_node("Transpose", {y}, {both}), "perm", {2, 0, 1, 3});
  } else {
    const std::string fl = ctx.fresh(name + "/forward_last"), bl = ctx.fresh(name + "/backward_last");
    const std::string axes = ctx.add_int64s(name + "/time_direction_axes", {0, 1});
    ctx.add_node("Slice", {y, ctx.add_int64s(name + "/forward_start", {t - 1, 0}), ctx.add_int64s(name + "/forward_end", {t, 1}), axes}, {fl});
    ctx.add_node("Slice", {y, ctx.add_int64s(name + "/backward_start", {0, 1}), ctx.add_int64s(name + "/backward_end", {1, 2}), axes}, {bl});
    const std::string cat = ctx.fresh(name + "/last_steps");
    attr_int(ctx.add_node("Concat", {fl, bl}, {cat}), "axis", 1);  // [1, 2, N, U]
    attr_ints(ctx.add_node("Transpose", {cat}, {both}), "perm", {0, 2, 1, 3});
  }
  const std::vector<int64_t> out_shape = seq ? std::vector<int64_t>{-1, t, merge == "concat" ? 2 * u : u}
                                             : std::vector<int64_t>{-1, merge == "concat" ? 2 * u : u};
  std::string merged = both;
  if (merge != "concat") {
    const std::string a = ctx.fresh(name + "/forward"), b = ctx.fresh(name + "/backward");
    const std::string axis = ctx.add_int64s(name + "/direction_axis", {2});
    ctx.add_node("Slice", {both, ctx.add_int64s(name + "/first", {0}), ctx.add_int64s(name + "/second", {1}), axis}, {a});
    ctx.add_node("Slice", {both, ctx.add_int64s(name + "/second_start", {1}), ctx.add_int64s(name + "/end", {2}), axis}, {b});
    merged = ctx.fresh(name + "/" + merge);
    ctx.add_node(merge == "mul" ? "Mul" : "Add", {a, b}, {merged});
    if (merge == "ave") {
      const std::string half = ctx.fresh(name + "/halved");
      ctx.add_node("Mul", {merged, ctx.add_scalar(name + "/one_half", 0.5f)}, {half});
      merged = half;
    }
  }
  ctx.add_node("Reshape", {merged, ctx.add_int64s(name + "/shape", out_shape)}, {ctx.output_name(i)});
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
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
const RegisterExporter simple_rnn({"simple_rnn"}, export_simple_rnn);
const RegisterExporter bidirectional({"bidirectional"}, export_bidirectional);

}  // namespace
}  // namespace trainer::onnx_export
