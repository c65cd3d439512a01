// Keras's `activation:` key of dense and convolution layers: the layer it adds, what names it, its errors, and training equal to a separate activation layer.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "graph_test_util.h"
#include "smoke_train.h"
#include "test_dirs.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {

const GraphNode& node(const Graph& g, const std::string& name) {
  const int i = g.node_index(name);
  REQUIRE(i >= 0);
  return g.nodes()[size_t(i)];
}
std::string input_name(const Graph& g, const GraphNode& n, size_t k) {
  return n.inputs[k] < 0 ? "(model input)" : g.nodes()[size_t(n.inputs[k])].layer->name();
}

}  // namespace

TEST_CASE("activation key: a dense or convolution's activation is a layer after it, which every reference names", "[activation_key]") {
  Graph g = build(R"(
model:
  input: [8, 8, 3]
  layers:
    - {name: c, type: conv2d, filters: 4, kernel: 3, activation: relu}
    - {name: d, type: depthwise_conv2d, kernel: 3, padding: same, activation: relu6}
    - {name: gap, type: global_avg_pool2d}
    - {name: h, type: dense, units: 6, activation: gelu}
    - {name: lin, type: dense, units: 6, activation: linear}
    - {name: skip, type: add, inputs: [h, lin]}
    - {name: out, type: dense, units: 5, activation: softmax}
)");
  CHECK(node(g, "c/activation").layer->type() == "activation");
  CHECK(node(g, "c/activation").layer->activation() == ActKind::Relu);
  CHECK(node(g, "d/activation").layer->activation() == ActKind::Relu6);
  CHECK(node(g, "h/activation").layer->activation() == ActKind::Gelu);
  CHECK(g.node_index("lin/activation") < 0);  // linear: Keras's default, no layer
  CHECK(node(g, "out/activation").layer->type() == "softmax");
  // Each activation reads its layer; the next layer (the previous-layer default or `inputs:`) reads
  // the activation, as it reads a Keras layer's activated output.
  CHECK(input_name(g, node(g, "c/activation"), 0) == "c");
  CHECK(input_name(g, node(g, "d"), 0) == "c/activation");
  CHECK(input_name(g, node(g, "gap"), 0) == "d/activation");
  CHECK(input_name(g, node(g, "skip"), 0) == "h/activation");
  CHECK(input_name(g, node(g, "skip"), 1) == "lin");
  CHECK(g.nodes().back().layer->name() == "out/activation");
  CHECK(g.output_shape() == Shape{5});
  // Parameters stay the layer's own ("c/kernel"); an activation holds none.
  CHECK(node(g, "c/activation").layer->params().empty());
  CHECK(node(g, "c").layer->params()[0].shape == Shape{3, 3, 3, 4});
}

TEST_CASE("activation key: output:, blocks with the activation as a parameter, and shared layers", "[activation_key]") {
  Graph g = build(R"(
model:
  input: [4]
  blocks:
    fc:
      params: {units: null, act: relu}
      layers:
        - {name: dense, type: dense, units: $units, activation: $act}
  layers:
    - {name: a, type: fc, units: 3, act: tanh}
    - {name: b, type: fc, units: 3}
    - {name: s, share: b, inputs: [a]}
    - {name: m, type: dense, units: 2, activation: sigmoid, inputs: [s]}
  output: m
)");
  CHECK(node(g, "a/dense/activation").layer->activation() == ActKind::Tanh);
  CHECK(node(g, "b/dense/activation").layer->activation() == ActKind::Relu);  // the block's default
  CHECK(input_name(g, node(g, "b/dense"), 0) == "a/dense/activation");
  // A second use of b applies b's activation too (Keras calls the whole layer again).
  CHECK(node(g, "s/activation").layer->activation() == ActKind::Relu);
  CHECK(input_name(g, node(g, "s"), 0) == "a/dense/activation");
  CHECK(input_name(g, node(g, "m"), 0) == "s/activation");
  // `output: m` is m's activated output, as m's Keras output is.
  CHECK(g.nodes()[size_t(g.output_node())].layer->name() == "m/activation");
}

TEST_CASE("activation key: leaky_relu's and elu's parameters: the layers' Keras defaults differ from the functions'", "[activation_key]") {
  Graph g = build(R"(
model:
  input: [4]
  layers:
    - {name: f, type: dense, units: 3, activation: leaky_relu}
    - {name: l, type: leaky_relu}
    - {name: l2, type: leaky_relu, negative_slope: 0.01}
    - {name: e, type: elu}
    - {name: e2, type: elu, alpha: 0.5}
    - {name: e3, type: activation, function: elu}
)");
  // keras.activations.leaky_relu: 0.2; keras.layers.LeakyReLU(): 0.3; ELU: alpha 1 both.
  CHECK(node(g, "f/activation").layer->describe().real("negative_slope") == Approx(0.2).epsilon(1e-7));
  CHECK(node(g, "l").layer->describe().real("negative_slope") == Approx(0.3).epsilon(1e-7));
  CHECK(node(g, "l2").layer->describe().real("negative_slope") == Approx(0.01).epsilon(1e-7));
  CHECK(node(g, "e").layer->describe().real("alpha") == 1.0);
  CHECK(node(g, "e2").layer->describe().real("alpha") == 0.5);
  CHECK(node(g, "e3").layer->describe().real("alpha") == 1.0);
  CHECK(node(g, "l").layer->in_place());  // its derivative from y, as relu's
  CHECK_FALSE(node(g, "e").layer->in_place());
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: leaky_relu, negative_slope: -0.1}\n"),
             Catch::StartsWith("test.yaml:4:42:") && Catch::Contains("negative_slope"));
}

TEST_CASE("activation key: Keras's Activation(\"softmax\") as an activation layer is the softmax layer", "[activation_key]") {
  Graph g = build(R"(
model:
  input: [4]
  layers:
    - {name: a, type: dense, units: 3}
    - {name: p, type: activation, function: softmax}
    - {name: b, type: dense, units: 3, inputs: [a]}
    - {name: q, type: activation, activation: softmax}
  output: p
)");
  CHECK(node(g, "p").layer->type() == "softmax");
  CHECK(node(g, "q").layer->type() == "softmax");
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: activation, function: sofmax}\n"),
             Catch::StartsWith("test.yaml:4:36:") && Catch::Contains("did you mean 'softmax'"));
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: softmax, function: relu}\n"),
             Catch::StartsWith("test.yaml:4:33:") && Catch::Contains("valid: softmax"));
}

TEST_CASE("activation key: errors name file:line:col: an unknown activation, a layer without the key, both keys", "[activation_key]") {
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: dense, units: 3, activation: rleu}\n"),
             Catch::StartsWith("test.yaml:4:43: 'rleu' is not an activation") && Catch::Contains("did you mean 'relu'"));
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: dense, units: 3, activation: [relu]}\n"),
             Catch::StartsWith("test.yaml:4:43:") && Catch::Contains("must be a string"));
  // An LSTM's `activation` is its cell's (Keras's tanh), not an activation after it: not taken.
  CHECK_THAT(error_of("model:\n  input: [5, 4]\n  layers:\n    - {type: lstm, units: 3, activation: relu}\n"),
             Catch::StartsWith("test.yaml:4:30: unknown key 'activation'"));
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: flatten, activation: relu}\n"),
             Catch::StartsWith("test.yaml:4:23: unknown key 'activation'"));
  // The activation layer itself takes Keras's key (Activation's get_config) or `function`, not both.
  Graph g = build("model:\n  input: [4]\n  layers:\n    - {name: a, type: activation, activation: tanh}\n");
  CHECK(node(g, "a").layer->activation() == ActKind::Tanh);
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: activation, function: relu, activation: tanh}\n"),
             Catch::StartsWith("test.yaml:4:54:") && Catch::Contains("not both"));
  // The dense's own keys are still checked once, by the dense.
  CHECK_THAT(error_of("model:\n  input: [4]\n  layers:\n    - {type: dense, unts: 3, activation: relu}\n"),
             Catch::StartsWith("test.yaml:4:") && Catch::Contains("'unts'") && Catch::Contains("did you mean 'units'"));
}

TEST_CASE("activation key: training with activation: keys is bit-identical to separate activation layers", "[activation_key]") {
  // configs/smoke.yaml's model, written both ways (the batch norms dropped so that the activations
  // follow the convolutions and dense layers directly, as the key puts them).
  auto run = [](const std::string& layers) {
    const std::string dir = test::test_dir("activation-key");
    const std::string path = dir + "/model.yaml";
    std::ofstream(path) << "seed: 7\nmodel:\n  input: [16, 16, 3]\n  layers:\n" << layers
                        << "data:\n  train: {type: synthetic, size: 256, image_size: 16, seed: 11}\n"
                           "train: {epochs: 1, batch_size: 32}\noptimizer: {type: adam, lr: 0.01}\n";
    RunSpec e = load_run_spec(path, {});
    Replica rep(trainee_spec(e), Device::cpu(), 2);
    std::vector<double> losses;
    test::train_steps(e, rep, 6, 0.01f, &losses);
    return std::make_pair(rep.executor().params().download(rep.context()), losses);
  };
  const auto keyed = run(
      "    - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: same, activation: relu}\n"
      "    - {name: pool1, type: max_pool2d, pool: 2}\n"
      "    - {name: dw, type: depthwise_conv2d, kernel: 3, padding: same, activation: relu6}\n"
      "    - {name: gap, type: global_avg_pool2d}\n"
      "    - {name: hidden, type: dense, units: 12, activation: silu}\n"
      "    - {name: dense, type: dense, units: 10, activation: softmax}\n");
  const auto separate = run(
      "    - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: same}\n"
      "    - {name: relu1, type: relu}\n"
      "    - {name: pool1, type: max_pool2d, pool: 2}\n"
      "    - {name: dw, type: depthwise_conv2d, kernel: 3, padding: same}\n"
      "    - {name: relu2, type: relu6}\n"
      "    - {name: gap, type: global_avg_pool2d}\n"
      "    - {name: hidden, type: dense, units: 12}\n"
      "    - {name: act, type: silu}\n"
      "    - {name: dense, type: dense, units: 10}\n"
      "    - {name: softmax, type: softmax}\n");
  REQUIRE(keyed.first.size() == separate.first.size());
  CHECK(keyed.second == separate.second);
  CHECK(std::memcmp(keyed.first.data(), separate.first.data(), keyed.first.size() * sizeof(float)) == 0);
  CHECK(keyed.second.back() < keyed.second.front());  // it trained
}
