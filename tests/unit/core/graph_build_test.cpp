// Graph construction from YAML: blocks, shapes, parameter counts, and the config errors.
#include <catch2/catch.hpp>
#include <algorithm>
#include <random>

#include "core/graph/executor.h"
#include "core/run/spec.h"
#include "core/graph/graph.h"
#include "core/graph/summary.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("graph: MiniGoogLeNet has Keras' parameter counts and output shapes") {
  RunSpec e = load_run_spec(TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml", {});
  Graph g(e.model);
  CHECK(g.params().count(true) + g.params().count(false) == 1656250);
  CHECK(g.params().count(true) == 1652826);
  CHECK(g.params().count(false) == 3424);
  CHECK(g.nodes()[size_t(g.node_index("conv1/relu"))].shape == Shape{32, 32, 96});
  CHECK(g.nodes()[size_t(g.node_index("down1/concat"))].shape == Shape{15, 15, 160});
  CHECK(g.nodes()[size_t(g.node_index("down2/concat"))].shape == Shape{7, 7, 240});
  CHECK(g.nodes()[size_t(g.node_index("incep8/concat"))].shape == Shape{7, 7, 336});
  CHECK(g.output_shape() == Shape{10});
  std::string s = model_summary(g, "minigooglenet");
  CHECK(s.find("Total params: 1,656,250") != std::string::npos);
  CHECK(s.find("(None, 15, 15, 160)") != std::string::npos);
}

TEST_CASE("graph: blocks expand with parameters, defaults and nested blocks") {
  Graph g = build(R"(
model:
  input: [8, 8, 3]
  blocks:
    cbr:
      params: {filters: null, kernel: 3}
      layers:
        - {name: conv, type: conv2d, filters: $filters, kernel: $kernel, padding: same}
        - {name: act, type: relu}
    pair:
      params: [a, b]
      layers:
        - {name: left, type: cbr, filters: $a, inputs: [$input]}
        - {name: right, type: cbr, filters: $b, kernel: 1, inputs: [$input]}
        - {name: cat, type: concat, inputs: [left, right]}
  layers:
    - {name: p1, type: pair, a: 4, b: 6}
    - {name: res, type: cbr, filters: 10}
    - {name: sum, type: add, inputs: [res, p1]}
)");
  CHECK(g.node_index("p1/left/conv") >= 0);
  CHECK(g.nodes()[size_t(g.node_index("p1/cat"))].shape == Shape{8, 8, 10});
  CHECK(g.nodes()[size_t(g.node_index("p1/right/conv"))].layer->params()[0].shape == Shape{1, 1, 3, 6});
  CHECK(g.output_shape() == Shape{8, 8, 10});
  // `sum` takes the block's last layer (p1/cat) through the block instance's name.
  const GraphNode& sum = g.nodes()[size_t(g.node_index("sum"))];
  CHECK(g.nodes()[size_t(sum.inputs[1])].layer->name() == "p1/cat");
}

TEST_CASE("graph: forward references are sorted, cycles are reported with their path") {
  Graph g = build(R"(
model:
  input: [4]
  layers:
    - {name: b, type: dense, units: 3, inputs: [a]}
    - {name: a, type: dense, units: 5, inputs: [input]}
)");
  CHECK(g.nodes()[0].layer->name() == "a");
  std::string err = error_of(R"(
model:
  input: [4]
  layers:
    - {name: a, type: dense, units: 3, inputs: [c]}
    - {name: b, type: dense, units: 3, inputs: [a]}
    - {name: c, type: add, inputs: [b, input]}
)");
  CHECK_THAT(err, Catch::Contains("test.yaml:") && Catch::Contains("cycle") && Catch::Contains("a -> b -> c -> a"));
}

TEST_CASE("graph: config errors name file:line:col and suggest the nearest key") {
  CHECK_THAT(error_of("model:\n  input: [8, 8, 3]\n  layers:\n    - {type: conv2d, filtres: 4, kernel: 3}\n"),
             Catch::StartsWith("test.yaml:4:22: unknown key 'filtres'") && Catch::Contains("did you mean 'filters'"));
  CHECK_THAT(error_of("model:\n  input: [8, 8, 3]\n  layers:\n    - {type: conv2d, filters: many, kernel: 3}\n"),
             Catch::StartsWith("test.yaml:4:31:") && Catch::Contains("must be an integer"));
  CHECK_THAT(error_of("model:\n  input: [8, 8, 3]\n  layers:\n    - {type: conv2dd, filters: 4}\n"),
             Catch::StartsWith("test.yaml:4:14: unknown layer type 'conv2dd'") && Catch::Contains("did you mean 'conv2d'"));
  CHECK_THAT(error_of("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: c, type: conv2d, filters: 4, kernel: 3}\n"
                      "    - {type: add, inputs: [c, d]}\n"),
             Catch::StartsWith("test.yaml:5:31:") && Catch::Contains("input 'd'"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: conv2d, filters: 4, kernel: 5}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("does not fit its 4x4 input"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers:\n    - {type: dense, units: 4}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs a flat input"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 3]\n  layers: [\n"), Catch::StartsWith("test.yaml:4:1:"));
}

TEST_CASE("graph: --set overrides are applied and errors in them name the override") {
  auto doc = cfg::parse_document("model:\n  input: [4]\n  layers:\n    - {type: dense, units: 3}\n", "t.yaml",
                                 {"model.layers.0.units=7"});
  Graph g(parse_model(cfg::root(doc).child("model")));
  CHECK(g.output_shape() == Shape{7});
  try {
    auto bad = cfg::parse_document("model:\n  input: [4]\n  layers:\n    - {type: dense, units: 3}\n", "t.yaml",
                                   {"model.layers.0.units=lots"});
    Graph g2(parse_model(cfg::root(bad).child("model")));
    FAIL("no error");
  } catch (const cfg::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("--set model.layers.0.units=lots:"));
  }
}

TEST_CASE("graph: output gradients share memory where their backward lifetimes do not overlap") {
  // MiniGoogLeNet: one buffer per node would hold every output's size again; the plan keeps only
  // what is live at once in backward (a few of the largest layers). Correctness is checked by the
  // gradient checks and the data/device-parallel equivalence tests, which run through the plan.
  RunSpec e = load_run_spec(TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml", {});
  Graph g(e.model);
  auto ctx = make_context(Device::cpu(0), {1});
  Executor gx(std::make_shared<const Graph>(std::move(g)), *ctx, 1);
  Tensor x = ctx->zeros(Shape{2, 32, 32, 3});
  gx.forward(x, true);
  int64_t outputs = 0;
  for (const GraphNode& n : gx.nodes()) outputs += 2 * n.shape.numel() * 4;
  WARN("MiniGoogLeNet output gradients: " << gx.gradient_bytes() << " bytes planned for a batch of 2, "
                                          << outputs << " without sharing (" << 100.0 * double(gx.gradient_bytes()) / double(outputs) << "%)");
  CHECK(gx.gradient_bytes() < outputs / 4);
}

namespace {
// conv -> bn -> relu6 -> conv -> relu -> add (with the block's input) -> flatten -> dense. With
// `barrier`, a linear activation sits between each producer and its relu: linear runs in place
// but its own output is not reusable, so the relus get buffers of their own. The two graphs
// compute the same function with the same parameters.
std::string in_place_net(bool barrier) {
  std::string lin1 = barrier ? "    - {name: lin1, type: activation, function: linear}\n" : "";
  std::string lin2 = barrier ? "    - {name: lin2, type: activation, function: linear}\n" : "";
  return "model:\n  input: [6, 6, 3]\n  layers:\n"
         "    - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: same}\n"
         "    - {name: bn, type: batchnorm}\n" + lin1 +
         "    - {name: r1, type: relu6}\n"
         "    - {name: c2, type: conv2d, filters: 4, kernel: 3, padding: same}\n" + lin2 +
         "    - {name: r2, type: relu}\n"
         "    - {name: sum, type: add, inputs: [r1, r2]}\n"
         "    - {name: flat, type: flatten}\n"
         "    - {name: dense, type: dense, units: 3}\n";
}
}  // namespace

TEST_CASE("graph: activations run in place over a reusable producer (fused into batch norm), with the same gradients") {
  auto ctx = make_context(Device::cpu(0), {1});
  Graph a = test::build(in_place_net(false)), b = test::build(in_place_net(true));
  Executor ax(std::make_shared<const Graph>(std::move(a)), *ctx, 3);
  Executor bx(std::make_shared<const Graph>(std::move(b)), *ctx, 3);
  REQUIRE(ax.params().weights().numel() == bx.params().weights().numel());
  for (const ParamEntry& e : ax.params().entries())  // gamma 5: a good part of bn's outputs pass relu6's cap
    if (e.spec.name == "gamma") std::fill_n(ax.params().weights().f32() + e.offset, e.spec.shape.numel(), 5.0f);
  std::copy(ax.params().weights().f32(), ax.params().weights().f32() + ax.params().weights().numel(), bx.params().weights().f32());
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  Tensor x = ctx->empty(Shape{4, 6, 6, 3}), dy = ctx->empty(Shape{4, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = nd(rng);
  for (Executor* g : {&ax, &bx}) {
    g->forward(x, true);
    g->backward(dy, g->output_node());
  }
  // r1 and r2 share their producers' buffers in `a` (4 x 144 floats each), not in `b`.
  CHECK(bx.activation_bytes() - ax.activation_bytes() == 2 * 4 * 6 * 6 * 4 * 4);
  auto buffer = [](Executor& g, const char* n) { return g.output(g.node_index(n)).data(); };
  CHECK(buffer(ax, "r1") == buffer(ax, "bn"));  // the same memory, not a copy
  CHECK(buffer(ax, "r2") == buffer(ax, "c2"));
  CHECK(buffer(bx, "r1") != buffer(bx, "bn"));
  CHECK(buffer(bx, "r1") != buffer(bx, "lin1"));
  // On the CPU, batch norm also applies relu6 itself (one pass, forward and backward); the
  // convolution cannot, so r2 stays a pass of its own; in `b` relu6 does not run in place.
  CHECK(ax.fused_into(ax.node_index("r1")) == ax.node_index("bn"));
  CHECK(ax.fused_into(ax.node_index("r2")) == -1);
  CHECK(bx.fused_into(bx.node_index("r1")) == -1);
  for (const char* n : {"r1", "r2", "sum", "dense"}) {
    const Tensor &ya = ax.output(ax.node_index(n)), &yb = bx.output(bx.node_index(n));
    for (int64_t i = 0; i < ya.numel(); ++i) REQUIRE(ya.f32()[i] == yb.f32()[i]);
  }
  const int64_t np = ax.params().trainable_floats();
  int64_t capped = 0;
  const Tensor& r1 = ax.output(ax.node_index("r1"));
  for (int64_t i = 0; i < r1.numel(); ++i) capped += r1.f32()[i] == 6.0f;
  INFO("relu6 outputs at the cap: " << capped);
  CHECK(capped > 0);
  for (int64_t i = 0; i < np; ++i) REQUIRE(ax.params().grads().f32()[i] == bx.params().grads().f32()[i]);
}
