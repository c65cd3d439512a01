// Graph construction from YAML: blocks, shapes, parameter counts, and the config errors.
#include <catch2/catch.hpp>

#include "core/engine/experiment.h"
#include "core/graph/graph.h"
#include "core/graph/summary.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("graph: MiniGoogLeNet has Keras' parameter counts and output shapes") {
  Experiment e = load_experiment(TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml", {});
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
  Experiment e = load_experiment(TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml", {});
  Graph g(e.model);
  auto ctx = make_context(Device::cpu(0), {1});
  g.bind(*ctx, 1);
  Tensor x = ctx->zeros(Shape{2, 32, 32, 3});
  g.forward(x, true);
  int64_t outputs = 0;
  for (const GraphNode& n : g.nodes()) outputs += 2 * n.shape.numel();
  WARN("MiniGoogLeNet output gradients: " << g.gradient_floats() << " floats planned for a batch of 2, "
                                          << outputs << " without sharing (" << 100.0 * double(g.gradient_floats()) / double(outputs) << "%)");
  CHECK(g.gradient_floats() < outputs / 4);
}
