// ONNX export of the layers that move or join values: flatten and reshape (the trainer's H, W, C
// order kept: Transpose to NHWC first, and back for an image result), up_sampling2d (Resize, nearest or linear),
// cropping2d (Slice), permute (Transpose), dropout (left out: inference), zero_pad2d (Pad), concat (the channel
// axis), add (Add), multiply (Mul).
#include <fmt/format.h>

#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

void export_flatten(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const std::string name = ctx.node(i).layer->name();
  if (x.shape.rank() == 1) {  // already flat
    ctx.set_output(i, x);
    return;
  }
  std::string in = x.name;
  // NCHW holds the values in C, H, W order; the trainer's flatten (and the dense kernel after it)
  // reads them in H, W, C order. The orders agree when H * W or C is 1.
  if (x.shape.rank() == 3 && x.shape[0] * x.shape[1] > 1 && x.shape[2] > 1) {
    in = ctx.fresh(name + "/nhwc");
    attr_ints(ctx.add_node("Transpose", {x.name}, {in}), "perm", {0, 2, 3, 1});
  }
  attr_int(ctx.add_node("Flatten", {in}, {ctx.output_name(i)}), "axis", 1);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

// reshape: the values in the trainer's channels-last order, so an image is taken to NHWC first and
// an image result back to NCHW.
void export_reshape(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const std::string name = ctx.node(i).layer->name();
  const Shape& out = ctx.node(i).shape;
  std::string in = x.name;
  if (x.shape.rank() == 3) {
    in = ctx.fresh(name + "/nhwc");
    attr_ints(ctx.add_node("Transpose", {x.name}, {in}), "perm", {0, 2, 3, 1});
  }
  std::vector<int64_t> dims{0};
  for (size_t k = 0; k < out.rank(); ++k) dims.push_back(out[k]);
  const std::string shaped = out.rank() == 3 ? ctx.fresh(name + "/nhwc_out") : ctx.output_name(i);
  ctx.add_node("Reshape", {in, ctx.add_int64s(name + "/shape", dims)}, {shaped});
  if (out.rank() == 3) attr_ints(ctx.add_node("Transpose", {shaped}, {ctx.output_name(i)}), "perm", {0, 3, 1, 2});
  ctx.set_output(i, {ctx.output_name(i), out});
}

// permute: one Transpose. An image [H, W, C] is held as NCHW: its trainer axes 1, 2, 3 (H, W, C)
// are ONNX axes 2, 3, 1, so ONNX output axis 1 (the output's C) takes ONNX axis at(dims[2]), axis
// 2 at(dims[0]), axis 3 at(dims[1]); a sequence or vector keeps the trainer's order.
void export_permute(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const std::string dims_text = ctx.node(i).layer->describe().text("dims");
  std::vector<int64_t> dims;
  for (size_t at = 0; at < dims_text.size();) {
    const size_t comma = dims_text.find(',', at);
    dims.push_back(std::stoll(dims_text.substr(at, comma - at)));
    at = comma == std::string::npos ? dims_text.size() : comma + 1;
  }
  std::vector<int64_t> perm{0};
  if (x.shape.rank() == 3) {
    const int64_t onnx_axis[4] = {0, 2, 3, 1};  // trainer axis (1-based) -> ONNX axis
    perm.insert(perm.end(), {onnx_axis[dims[2]], onnx_axis[dims[0]], onnx_axis[dims[1]]});
  } else {
    perm.insert(perm.end(), dims.begin(), dims.end());
  }
  attr_ints(ctx.add_node("Transpose", {x.name}, {ctx.output_name(i)}), "perm", perm);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

// up_sampling2d: Resize, the scales [1, 1, sh, sw] on NCHW. Nearest: each output pixel (i, j) reading
// (floor(i / sh), floor(j / sw)) (asymmetric coordinates, floor). Bilinear: linear with half-pixel
// coordinates (TensorFlow's tf.image.resize, the edges clamped).
void export_up_sampling(ExportContext& ctx, size_t i) {
  const LayerConfig d = ctx.node(i).layer->describe();
  const std::string name = ctx.node(i).layer->name();
  const std::string roi = ctx.add_initializer(name + "/roi", {0}, {});
  const std::string scales =
      ctx.add_initializer(name + "/scales", {4}, {1.0f, 1.0f, float(d.integer("size_h")), float(d.integer("size_w"))});
  onnx::NodeProto* n = ctx.add_node("Resize", {ctx.input(i, 0).name, roi, scales}, {ctx.output_name(i)});
  if (d.text("interpolation") == "bilinear") {
    attr_string(n, "mode", "linear");
    attr_string(n, "coordinate_transformation_mode", "half_pixel");
  } else {
    attr_string(n, "mode", "nearest");
    attr_string(n, "coordinate_transformation_mode", "asymmetric");
    attr_string(n, "nearest_mode", "floor");
  }
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

// cropping2d: Slice of NCHW's rows and columns.
void export_cropping(ExportContext& ctx, size_t i) {
  const LayerConfig d = ctx.node(i).layer->describe();
  const std::string name = ctx.node(i).layer->name();
  const Shape& x = ctx.input(i, 0).shape;  // [H, W, C]
  const std::string starts = ctx.add_int64s(name + "/starts", {d.integer("top"), d.integer("left")});
  const std::string ends = ctx.add_int64s(name + "/ends", {x[0] - d.integer("bottom"), x[1] - d.integer("right")});
  ctx.add_node("Slice", {ctx.input(i, 0).name, starts, ends, ctx.add_int64s(name + "/axes", {2, 3})}, {ctx.output_name(i)});
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_dropout(ExportContext& ctx, size_t i) { ctx.set_output(i, ctx.input(i, 0)); }

void export_zero_pad(ExportContext& ctx, size_t i) {
  const LayerConfig d = ctx.node(i).layer->describe();
  if (d.has("folded_into")) {  // its reader's Conv takes the zeros as pads (pad_fold)
    ctx.set_output(i, ctx.input(i, 0));
    return;
  }
  const std::string name = ctx.node(i).layer->name();
  // [N, C, H, W]: begins of every axis, then ends.
  const std::string pads = ctx.add_int64s(
      name + "/pads", {0, 0, d.integer("top"), d.integer("left"), 0, 0, d.integer("bottom"), d.integer("right")});
  attr_string(ctx.add_node("Pad", {ctx.input(i, 0).name, pads}, {ctx.output_name(i)}), "mode", "constant");
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_concat(ExportContext& ctx, size_t i) {
  std::vector<std::string> in;
  for (size_t k = 0; k < ctx.node(i).inputs.size(); ++k) in.push_back(ctx.input(i, k).name);
  attr_int(ctx.add_node("Concat", in, {ctx.output_name(i)}), "axis", channel_axis(ctx.node(i).shape));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_add(ExportContext& ctx, size_t i) {
  const size_t k = ctx.node(i).inputs.size();
  std::string acc = ctx.input(i, 0).name;
  for (size_t j = 1; j < k; ++j) {
    const std::string out = j + 1 == k ? ctx.output_name(i) : ctx.fresh(ctx.node(i).layer->name() + "/partial");
    ctx.add_node("Add", {acc, ctx.input(i, j).name}, {out});
    acc = out;
  }
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

// multiply: Mul of two values of the output's shape: a broadcast input is expanded first, since
// OpenCV 4.6 multiplies a broadcast [N, C, 1, 1] wrongly past batch 1 (its 'total' assertion): by a
// MatMul with a constant of ones, which it runs at any batch. A gate [C] over an image (NCHW: the
// gate on the outer axis) is [N, C, 1]·ones[1, H·W], reshaped to [N, C, H, W]; a gate [F] over a
// sequence (the inner axis) [N, F, 1]·ones[1, T] transposed; one value per sample [N, 1, 1]·ones[1, all].
// A gate over an image's [W, C] has no such form (NCHW puts C before W): refused.
void export_multiply(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const Shape& out = ctx.node(i).shape;
  const std::string name = l.name();
  auto full_dims = [&] {  // the output's ONNX shape, the batch as -1
    std::vector<int64_t> d{-1};
    if (out.rank() == 3) d.insert(d.end(), {out[2], out[0], out[1]});
    else for (size_t k = 0; k < out.rank(); ++k) d.push_back(out[k]);
    return d;
  };
  auto expanded = [&](const Value& g) {
    if (g.shape == out) return g.name;
    const int64_t n = g.shape.numel(), all = out.numel();
    const bool inner = out.rank() == 2 && n == out[1] && n > 1;  // a sequence's feature gate
    if (!(n == 1 || inner || (out.rank() == 3 && n == out[2] && g.shape.back() == n)))
      l.spec().fail(fmt::format("multiply '{}': a {} input broadcast over {} has no ONNX form here (only a gate over "
                                "the channels or features, or one value per sample)",
                                name, g.shape.str(), out.str()));
    const std::string r = ctx.fresh(name + "/gate"), m = ctx.fresh(name + "/gate_expanded");
    if (inner) {  // [N, F, 1]·ones[1, T], transposed to [N, T, F] (OpenCV takes a constant second only)
      const int64_t T = out[0];
      ctx.add_node("Reshape", {g.name, ctx.add_int64s(name + "/gate_shape", {-1, n, 1})}, {r});
      ctx.add_node("MatMul", {r, ctx.add_initializer(name + "/ones", {1, T}, std::vector<float>(size_t(T), 1.0f), "ones")},
                   {m});
      const std::string t = ctx.fresh(name + "/gate_full");
      attr_ints(ctx.add_node("Transpose", {m}, {t}), "perm", {0, 2, 1});
      return t;
    }
    const int64_t k = all / n;  // the values each gate value multiplies
    ctx.add_node("Reshape", {g.name, ctx.add_int64s(name + "/gate_shape", {-1, n, 1})}, {r});
    ctx.add_node("MatMul", {r, ctx.add_initializer(name + "/ones", {1, k}, std::vector<float>(size_t(k), 1.0f), "ones")},
                 {m});
    const std::string e = ctx.fresh(name + "/gate_full");
    ctx.add_node("Reshape", {m, ctx.add_int64s(name + "/full_shape", full_dims())}, {e});
    return e;
  };
  ctx.add_node("Mul", {expanded(ctx.input(i, 0)), expanded(ctx.input(i, 1))}, {ctx.output_name(i)});
  ctx.set_output(i, {ctx.output_name(i), out});
}

const RegisterExporter flatten({"flatten"}, export_flatten);
const RegisterExporter reshape({"reshape"}, export_reshape);
const RegisterExporter up_sampling({"up_sampling2d"}, export_up_sampling);
const RegisterExporter cropping({"cropping2d"}, export_cropping);
const RegisterExporter multiply({"multiply"}, export_multiply);
const RegisterExporter dropout({"dropout", "spatial_dropout1d", "spatial_dropout2d", "gaussian_noise", "gaussian_dropout"},
                               export_dropout);
const RegisterExporter zero_pad({"zero_pad2d"}, export_zero_pad);
const RegisterExporter concat({"concat"}, export_concat);
const RegisterExporter add({"add"}, export_add);
const RegisterExporter permute({"permute"}, export_permute);

}  // namespace
}  // namespace trainer::onnx_export
