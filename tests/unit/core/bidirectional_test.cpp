// bidirectional layer (Keras Bidirectional): shapes, weights and their names, config errors at file:line:col, and on every device the bits of its definition composed from two plain layers (one fed the steps reversed) and the merge.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstring>
#include <random>
#include <string>

#include "core/graph/layer.h"
#include "graph_test_util.h"
#include "test_devices.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {

Graph bi_graph(const std::string& layer, const std::string& input = "[7, 3]") {
  return build("model:\n  input: " + input + "\n  layers:\n    - {name: bi, type: bidirectional, " + layer + "}\n");
}

// One layer made from its mapping as the graph makes it, bound on a device with the given weights.
struct OneLayer {
  std::unique_ptr<Layer> layer;
  std::vector<Tensor> params, grads;
  OneLayer(OpContext& ctx, const std::string& yaml, const Shape& in, const std::vector<std::vector<float>>& weights) {
    auto doc = cfg::parse_document(yaml, "layer.yaml");
    cfg::Node node = cfg::root(doc);
    cfg::MapReader r(node, "layer");
    r.allow({"name"});
    const std::string type = r.get<std::string>("type");
    layer = find_layer(type)->make(r);
    r.finish();
    layer->set_identity("l", type, node);
    layer->infer({in});
    const std::vector<ParamSpec> ps = layer->params();
    REQUIRE((weights.empty() || ps.size() == weights.size()));
    for (size_t i = 0; i < ps.size(); ++i) {
      params.push_back(ctx.empty(ps[i].shape));
      if (weights.empty()) continue;  // shapes only: the weights are never read
      REQUIRE(size_t(ps[i].shape.numel()) == weights[i].size());
      ctx.copy_from_host(params.back().data(), weights[i].data(), weights[i].size() * sizeof(float));
    }
    for (const ParamSpec& p : ps) grads.push_back(ctx.empty(p.shape));
    layer->bind(ctx, params, grads);
  }
};

Tensor upload(OpContext& ctx, const std::vector<float>& v, const Shape& s) {
  Tensor t = ctx.empty(s);
  if (!v.empty()) ctx.copy_from_host(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

// x [N, T, W] with its steps reversed, on the host.
std::vector<float> reversed(const std::vector<float>& x, int64_t n, int64_t t) {
  std::vector<float> r(x.size());
  const int64_t w = n * t != 0 ? int64_t(x.size()) / (n * t) : 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t s = 0; s < t; ++s)
      std::memcpy(&r[size_t((b * t + s) * w)], &x[size_t((b * t + t - 1 - s) * w)], size_t(w) * sizeof(float));
  return r;
}

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, float a) {
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

}  // namespace

TEST_CASE("bidirectional: Keras's output shapes, weights forward_<layer>/... and backward_<layer>/..., summary name") {
  CHECK(bi_graph("layer: {type: lstm, units: 4}").output_shape() == Shape{8});
  CHECK(bi_graph("layer: {type: lstm, units: 4, return_sequences: true}").output_shape() == Shape{7, 8});
  CHECK(bi_graph("layer: {type: gru, units: 5, return_sequences: true}, merge_mode: sum").output_shape() == Shape{7, 5});
  CHECK(bi_graph("layer: {type: gru, units: 5}, merge_mode: ave").output_shape() == Shape{5});
  CHECK(bi_graph("layer: {type: lstm, units: 2}, merge_mode: mul").output_shape() == Shape{2});
  CHECK(find_layer("bidirectional")->keras_name == "Bidirectional");
  const Graph g = bi_graph("layer: {type: lstm, units: 4, name: enc}");
  std::vector<std::pair<std::string, Shape>> got;
  for (const ParamEntry& e : g.params().entries()) got.emplace_back(e.name, e.spec.shape);
  CHECK(got == std::vector<std::pair<std::string, Shape>>{{"bi/forward_enc/kernel", Shape{3, 16}},
                                                           {"bi/forward_enc/recurrent_kernel", Shape{4, 16}},
                                                           {"bi/forward_enc/bias", Shape{16}},
                                                           {"bi/backward_enc/kernel", Shape{3, 16}},
                                                           {"bi/backward_enc/recurrent_kernel", Shape{4, 16}},
                                                           {"bi/backward_enc/bias", Shape{16}}});
  CHECK(bi_graph("layer: {type: simple_rnn, units: 3, return_sequences: true}, merge_mode: concat").output_shape() == Shape{7, 6});
  CHECK(bi_graph("layer: {type: simple_rnn, units: 3, activation: relu}").params().entries()[3].name == "bi/backward_simple_rnn/kernel");
  const Graph gru = bi_graph("layer: {type: gru, units: 2, use_bias: false}");
  CHECK(gru.params().entries().size() == 4);
  CHECK(gru.params().entries()[2].name == "bi/backward_gru/kernel");
  // Two recurrent layers' work, the merge's besides.
  const Graph one = build("model:\n  input: [7, 3]\n  layers:\n    - {name: l, type: lstm, units: 4}\n");
  CHECK(g.nodes()[0].layer->flops() == 2 * one.nodes()[0].layer->flops());
}

TEST_CASE("bidirectional: config errors at file:line:col") {
  const std::string head = "model:\n  input: [7, 3]\n  layers:\n    - {name: bi, type: bidirectional";
  CHECK_THAT(error_of(head + "}\n"), Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'layer'"));
  CHECK_THAT(error_of(head + ", layer: {type: dense, units: 3}}\n"),
             Catch::StartsWith("test.yaml:4:53:") && Catch::Contains("lstm") && Catch::Contains("gru") && Catch::Contains("simple_rnn"));
  CHECK_THAT(error_of(head + ", layer: lstm}\n"), Catch::StartsWith("test.yaml:4:46:") && Catch::Contains("{type: lstm, units: 64}"));
  CHECK_THAT(error_of(head + ", layer: {type: lstm, unit: 3}}\n"), Catch::Contains("unit") && Catch::Contains("units"));
  CHECK_THAT(error_of(head + ", layer: {type: lstm, units: 3}, merge_mode: avg}\n"),
             Catch::StartsWith("test.yaml:4:82:") && Catch::Contains("ave"));
  CHECK_THAT(error_of(head + ", layer: {type: lstm, units: 3}, merge_mode: null}\n"),
             Catch::StartsWith("test.yaml:4:82:") && Catch::Contains("two separate outputs"));
  CHECK_THAT(error_of(head + ", layer: {type: lstm, units: 3, name: a/b}}\n"),
             Catch::StartsWith("test.yaml:4:75:") && Catch::Contains("'/' separates scopes"));
  CHECK_THAT(error_of(head + ", layer: {type: lstm, units: 3}, backward_layer: {type: lstm, units: 3}}\n"),
             Catch::Contains("backward_layer"));
  CHECK_THAT(error_of("model:\n  input: [6]\n  layers:\n    - {name: bi, type: bidirectional, layer: {type: gru, units: 3}}\n"),
             Catch::StartsWith("test.yaml:4:46:") && Catch::Contains("(steps, features)"));
}

// Keras's definition, composed here from two plain layers with the two halves' weights — one fed x,
// one fed x's steps reversed (its output sequence reversed back) — and the merge done on the host
// in f32: the layer's output, input gradient and weight gradients are those bits on every device,
// for each merge mode, both output forms, batch 1, an empty batch, and without an input gradient.
TEST_CASE("bidirectional: the bits of two plain layers, one over the reversed steps, merged as Keras merges", "[backends]") {
  for (const test::TestDevice& d : test::test_devices()) {
    ContextOptions o;
    o.threads = 2;
    auto ctx = make_context(d.device, o);
    ctx->bind_thread();
    std::mt19937_64 rng(5);
    int cases = 0;
    for (const char* type : {"lstm", "gru", "simple_rnn"})
      for (const char* merge : {"concat", "sum", "ave", "mul"})
        for (bool seq : {true, false})
          for (int64_t n : {3, 1, 0}) {
            const bool want_dx = (cases % 3) != 2;
            const int64_t T = 5, F = 4, U = 3;
            INFO(d.name << ": " << type << ", merge " << merge << (seq ? ", sequences" : ", last state") << ", batch " << n
                        << (want_dx ? "" : ", no dx"));
            const std::string inner = fmt::format("{{type: {}, units: {}, return_sequences: {}}}", type, U, seq);
            const Shape in{T, F};
            // The halves' weights (the plain layer's shapes), of order one.
            OneLayer shapes(*ctx, inner, in, {});
            std::vector<std::vector<float>> wf, wb;
            for (const ParamSpec& p : shapes.layer->params()) {
              wf.push_back(random_floats(size_t(p.shape.numel()), rng, 0.6f));
              wb.push_back(random_floats(size_t(p.shape.numel()), rng, 0.6f));
            }
            std::vector<std::vector<float>> both = wf;
            both.insert(both.end(), wb.begin(), wb.end());
            OneLayer bi(*ctx, fmt::format("{{type: bidirectional, layer: {}, merge_mode: {}}}", inner, merge), in, both);
            OneLayer fwd(*ctx, inner, in, wf), bwd(*ctx, inner, in, wb);

            const std::vector<float> hx = random_floats(size_t(n * T * F), rng, 1.5f);
            const Shape xs{n, T, F}, hs = seq ? Shape{n, T, U} : Shape{n, U};
            const bool concat = std::string(merge) == "concat";
            const Shape ys = concat ? (seq ? Shape{n, T, 2 * U} : Shape{n, 2 * U}) : hs;
            Tensor x = upload(*ctx, hx, xs), xr = upload(*ctx, reversed(hx, n, T), xs);
            Tensor y = ctx->empty(ys), yf = ctx->empty(hs), yb = ctx->empty(hs);
            bi.layer->forward({&x}, y, true);
            fwd.layer->forward({&x}, yf, true);
            bwd.layer->forward({&xr}, yb, true);
            const std::vector<float> a = test::host_floats(*ctx, yf);
            std::vector<float> b = test::host_floats(*ctx, yb);
            if (seq) b = reversed(b, n, T);
            const int64_t rows = int64_t(a.size()) / U;
            std::vector<float> want(size_t(ys.numel()));
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < U; ++j) {
                const float p = a[size_t(r * U + j)], q = b[size_t(r * U + j)];
                if (concat) {
                  want[size_t(r * 2 * U + j)] = p;
                  want[size_t(r * 2 * U + U + j)] = q;
                } else {
                  const std::string m = merge;
                  want[size_t(r * U + j)] = m == "sum" ? p + q : m == "ave" ? (p + q) * 0.5f : p * q;
                }
              }
            CHECK(test::host_floats(*ctx, y) == want);

            // Backward: the halves' gradients as Keras's merge gives them, the backward half's
            // in its own step order.
            const std::vector<float> hdy = random_floats(size_t(ys.numel()), rng, 1.0f);
            std::vector<float> dyf(a.size()), dyb(a.size());
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < U; ++j) {
                const size_t k = size_t(r * U + j);
                const std::string m = merge;
                if (concat) {
                  dyf[k] = hdy[size_t(r * 2 * U + j)];
                  dyb[k] = hdy[size_t(r * 2 * U + U + j)];
                } else if (m == "sum") {
                  dyf[k] = dyb[k] = hdy[k];
                } else if (m == "ave") {
                  dyf[k] = dyb[k] = hdy[k] * 0.5f;
                } else {
                  dyf[k] = hdy[k] * b[k];
                  dyb[k] = hdy[k] * a[k];
                }
              }
            if (seq) dyb = reversed(dyb, n, T);
            Tensor dy = upload(*ctx, hdy, ys), tdyf = upload(*ctx, dyf, hs), tdyb = upload(*ctx, dyb, hs);
            Tensor dx = want_dx ? ctx->empty(xs) : Tensor(), dxf = want_dx ? ctx->empty(xs) : Tensor(),
                   dxb = want_dx ? ctx->empty(xs) : Tensor();
            bi.layer->backward({&x}, y, dy, {&dx});
            fwd.layer->backward({&x}, yf, tdyf, {&dxf});
            bwd.layer->backward({&xr}, yb, tdyb, {&dxb});
            if (want_dx) {
              const std::vector<float> f = test::host_floats(*ctx, dxf), r = reversed(test::host_floats(*ctx, dxb), n, T);
              std::vector<float> sum(f.size());
              for (size_t k = 0; k < f.size(); ++k) sum[k] = f[k] + r[k];
              CHECK(test::host_floats(*ctx, dx) == sum);
            }
            for (size_t i = 0; i < fwd.grads.size(); ++i) {
              INFO("weight " << i);
              CHECK(test::host_floats(*ctx, bi.grads[i]) == test::host_floats(*ctx, fwd.grads[i]));
              CHECK(test::host_floats(*ctx, bi.grads[fwd.grads.size() + i]) == test::host_floats(*ctx, bwd.grads[i]));
            }
            ++cases;
          }
    CHECK(cases == 72);
  }
}
