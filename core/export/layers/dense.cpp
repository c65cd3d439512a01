// ONNX export of dense: Gemm(x [N, F], kernel^T [U, F], bias [U]) with transB = 1 (the form every
// runtime takes; OpenCV 4.6 refuses transB = 0), a following batch norm folded into kernel columns and
// bias; over a sequence [N, T, F], MatMul(x, kernel [F, U]) then Add(bias) (Gemm is 2-D only); a kernel
// tied to an embedding is its table transposed.
#include <fmt/format.h>

#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

void export_dense(ExportContext& ctx, size_t i) {
  const LayerConfig d = ctx.node(i).layer->describe();
  const Value& x = ctx.input(i, 0);
  const int64_t f = x.shape.back(), u = d.integer("units");
  std::vector<float> k = ctx.param(i, "kernel"), b;
  // Tied to an embedding (tie:): its table [U, F] read as the kernel [F, U], under a name of its own
  // (the embedding's Gather keeps the table's).
  const bool tied = d.has("tie");
  std::string kernel_name = ctx.param_entry(i, "kernel").name;
  if (tied) {
    std::vector<float> t(k.size());
    for (int64_t r = 0; r < u; ++r)
      for (int64_t c = 0; c < f; ++c) t[size_t(c * u + r)] = k[size_t(r * f + c)];
    k = std::move(t);
    kernel_name = ctx.node(i).layer->name() + "/kernel";
  }
  if (d.flag("use_bias")) b = ctx.param(i, "bias");
  const bool positions = x.shape.rank() > 1;  // a sequence: MatMul
  std::string kdoc = positions ? "trainer [F, U], MatMul's B" : "trainer [F, U] transposed to [U, F], Gemm's B with transB = 1",
              bdoc;
  if (tied) kdoc += fmt::format(" (tied: the transpose of {})", ctx.param_entry(i, "kernel").name);
  if (const ChannelAffine* a = ctx.folded_into(i)) {
    if (b.empty()) b.assign(size_t(u), 0.0f);
    for (int64_t r = 0; r < f; ++r)
      for (int64_t c = 0; c < u; ++c) k[size_t(r * u + c)] = float(double(k[size_t(r * u + c)]) * a->scale[size_t(c)]);
    for (int64_t c = 0; c < u; ++c) b[size_t(c)] = float(double(b[size_t(c)]) * a->scale[size_t(c)] + a->shift[size_t(c)]);
    kdoc += fmt::format("; batch norm '{}' folded in (columns x gamma / sqrt(moving_variance + epsilon))", a->batchnorm);
    bdoc = "bias with the folded batch norm's shift";
  }
  auto bias_input = [&] {
    const std::string bname = d.flag("use_bias") ? ctx.param_entry(i, "bias").name : ctx.node(i).layer->name() + "/bias";
    return ctx.add_initializer(bname, {u}, b, bdoc);
  };
  if (positions) {
    const std::string kname = ctx.add_initializer(kernel_name, {f, u}, k, kdoc);
    const std::string prod = b.empty() ? ctx.output_name(i) : ctx.fresh(ctx.node(i).layer->name() + "/matmul");
    ctx.add_node("MatMul", {x.name, kname}, {prod});
    if (!b.empty()) ctx.add_node("Add", {prod, bias_input()}, {ctx.output_name(i)});
    ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
    return;
  }
  std::vector<float> kt(k.size());
  for (int64_t r = 0; r < f; ++r)
    for (int64_t c = 0; c < u; ++c) kt[size_t(c * f + r)] = k[size_t(r * u + c)];
  std::vector<std::string> in{x.name, ctx.add_initializer(kernel_name, {u, f}, kt, kdoc)};
  if (!b.empty()) in.push_back(bias_input());
  attr_int(ctx.add_node("Gemm", in, {ctx.output_name(i)}), "transB", 1);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter dense({"dense"}, export_dense, true);

}  // namespace
}  // namespace trainer::onnx_export
