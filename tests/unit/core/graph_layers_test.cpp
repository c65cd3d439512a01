// depthwise_conv2d and zero_pad2d layers in a graph: shapes, parameters, initialiser fans, summary, config errors, gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/graph/executor.h"
#include "core/graph/graph.h"
#include "core/graph/summary.h"
#include "core/ops/softmax.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {

const Shape& shape_of(const Graph& g, const char* node) {
  int i = g.node_index(node);
  REQUIRE(i >= 0);
  return g.nodes()[size_t(i)].shape;
}

// A MobileNetV2-like inverted residual piece: expand, pad for a stride-2 'valid' depthwise, project.
const char* kBlock = R"(
model:
  input: [10, 10, 8]
  layers:
    - {name: expand, type: conv2d, filters: 16, kernel: 1, use_bias: false}
    - {name: expand_relu, type: relu6}
    - {name: pad, type: zero_pad2d, padding: [[0, 1], [0, 1]]}
    - {name: dw, type: depthwise_conv2d, kernel: 3, strides: 2, padding: valid, use_bias: false}
    - {name: dw_relu, type: relu6}
    - {name: dw2, type: depthwise_conv2d, kernel: [3, 5], depth_multiplier: 2, padding: same}
    - {name: pad2, type: zero_pad2d, padding: 2}
    - {name: pad3, type: zero_pad2d, padding: [1, 0]}
    - {name: pad4, type: zero_pad2d}
)";

}  // namespace

TEST_CASE("graph: depthwise_conv2d and zero_pad2d shapes, parameter counts, fans and summary") {
  Graph g = build(kBlock);
  CHECK(shape_of(g, "pad") == Shape{11, 11, 16});
  CHECK(shape_of(g, "dw") == Shape{5, 5, 16});  // (11 - 3) / 2 + 1
  CHECK(shape_of(g, "dw_relu") == Shape{5, 5, 16});
  CHECK(shape_of(g, "dw2") == Shape{5, 5, 32});  // C * depth_multiplier
  CHECK(shape_of(g, "pad2") == Shape{9, 9, 32});
  CHECK(shape_of(g, "pad3") == Shape{11, 9, 32});
  CHECK(shape_of(g, "pad4") == Shape{13, 11, 32});  // Keras' default padding 1

  // expand 8*16 = 128; dw 3*3*16*1 = 144 (no bias); dw2 3*5*16*2 = 480 + bias 32.
  CHECK(g.params().count(true) == 128 + 144 + 480 + 32);
  CHECK(g.params().count(false) == 0);
  const Layer& dw = *g.nodes()[size_t(g.node_index("dw"))].layer;
  REQUIRE(dw.params().size() == 1);
  CHECK(dw.params()[0].name == "depthwise_kernel");
  CHECK(dw.params()[0].shape == Shape{3, 3, 16, 1});
  const Layer& dw2 = *g.nodes()[size_t(g.node_index("dw2"))].layer;
  REQUIRE(dw2.params().size() == 2);
  CHECK(dw2.params()[0].shape == Shape{3, 5, 16, 2});
  CHECK(dw2.params()[1].shape == Shape{32});
  // tf.keras _compute_fans on [kh, kw, C, M]: receptive field * C in, receptive field * M out.
  CHECK(dw2.params()[0].fan_in == 15 * 16);
  CHECK(dw2.params()[0].fan_out == 15 * 2);
  CHECK(dw2.params()[0].init == InitKind::GlorotUniform);
  CHECK(dw.flops() == 2 * 5 * 5 * 16 * 9);
  CHECK(dw2.flops() == 2 * 5 * 5 * 32 * 15);
  CHECK(g.nodes()[size_t(g.node_index("pad"))].layer->params().empty());

  std::string s = model_summary(g, "tiny");
  CHECK(s.find("dw (DepthwiseConv2D)") != std::string::npos);
  CHECK(s.find("pad (ZeroPadding2D)") != std::string::npos);
  CHECK(s.find("(None, 5, 5, 32)") != std::string::npos);
  CHECK(s.find("Total params: 784") != std::string::npos);

  // The Glorot-uniform limit sqrt(6 / (fan_in + fan_out)) bounds the initial depthwise weights.
  auto ctx = make_context(Device::cpu(), {2});
  Executor gx(std::make_shared<const Graph>(std::move(g)), *ctx, 3);
  for (const ParamEntry& e : gx.params().entries()) {
    if (e.name != "dw2/depthwise_kernel") continue;
    const float* w = gx.params().weights().f32() + e.offset;
    double limit = std::sqrt(6.0 / (15 * 16 + 15 * 2)), top = 0;
    for (int64_t i = 0; i < e.spec.shape.numel(); ++i) top = std::max(top, std::abs(double(w[i])));
    CHECK(top <= limit);
    CHECK(top > 0.9 * limit);
  }
  Tensor x = Tensor::empty(Shape{2, 10, 10, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i % 7) - 3.0f;
  gx.forward(x, true);
  CHECK(gx.output(gx.output_node()).shape() == Shape{2, 13, 11, 32});
}

TEST_CASE("graph: depthwise_conv2d and zero_pad2d config errors name file:line:col") {
  auto net = [](const std::string& layer) { return "model:\n  input: [8, 8, 3]\n  layers:\n    - " + layer + "\n"; };
  CHECK_THAT(error_of(net("{type: depthwise_conv2d, kernel: 3, depth_multipler: 2}")),
             Catch::StartsWith("test.yaml:4:43: unknown key 'depth_multipler'") &&
                 Catch::Contains("did you mean 'depth_multiplier'"));
  CHECK_THAT(error_of(net("{type: depthwise_conv2d, kernel: 3, depth_multiplier: 0}")),
             Catch::StartsWith("test.yaml:4:61:") && Catch::Contains("must be between 1"));
  CHECK_THAT(error_of(net("{type: depthwise_conv2d, kernel: 9}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("does not fit its 8x8 input"));
  CHECK_THAT(error_of(net("{type: depthwise_conv2d}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("missing required key 'kernel'"));
  CHECK_THAT(error_of(net("{type: depthwise_conv2d, kernel: 3, strides: 2, dilation: 2}")),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("strides > 1 with dilation > 1"));
  CHECK_THAT(error_of(net("{type: depthwise_conv2d, kernel: 3, depthwise_initializer: glorot}")),
             Catch::StartsWith("test.yaml:4:66:") && Catch::Contains("glorot_uniform"));
  CHECK_THAT(error_of(net("{type: zero_pad2d, padding: [1, 2, 3]}")),
             Catch::StartsWith("test.yaml:4:35:") && Catch::Contains("[[top, bottom], [left, right]]"));
  CHECK_THAT(error_of(net("{type: zero_pad2d, padding: [[1, 2], 3]}")), Catch::StartsWith("test.yaml:4:35:"));
  CHECK_THAT(error_of(net("{type: zero_pad2d, padding: [[1, 2], [3, -1]]}")),
             Catch::StartsWith("test.yaml:4:48:") && Catch::Contains("must not be negative"));
  CHECK_THAT(error_of(net("{type: zero_pad2d, padding: two}")),
             Catch::StartsWith("test.yaml:4:35:") && Catch::Contains("integer"));
  CHECK_THAT(error_of(net("{type: zero_pad2d, pading: 1}")),
             Catch::StartsWith("test.yaml:4:26: unknown key 'pading'") && Catch::Contains("did you mean 'padding'"));
  CHECK_THAT(error_of("model:\n  input: [8]\n  layers:\n    - {type: zero_pad2d}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("needs an image input"));
}

TEST_CASE("graph: gradients through depthwise_conv2d and zero_pad2d match finite differences") {
  auto doc = cfg::parse_document(R"(
model:
  input: [7, 7, 3]
  layers:
    - {name: c0, type: conv2d, filters: 3, kernel: 1}
    - {name: pad, type: zero_pad2d, padding: [[1, 0], [0, 2]]}
    - {name: dw, type: depthwise_conv2d, kernel: 3, strides: 2, depth_multiplier: 2, padding: same}
    - {name: t1, type: tanh}
    - {name: dw2, type: depthwise_conv2d, kernel: [2, 3], use_bias: false}
    - {name: t2, type: tanh}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 4}
)",
                                 "gradcheck.yaml");
  Graph g(parse_model(cfg::root(doc).child("model")));
  CHECK(shape_of(g, "dw") == Shape{4, 5, 6});
  CHECK(shape_of(g, "dw2") == Shape{3, 3, 6});
  auto ctx = make_context(Device::cpu(), {2});
  Executor gx(std::make_shared<const Graph>(std::move(g)), *ctx, 11);
  auto loss = make_kernel<SoftmaxKernel>(*ctx, {});
  const int logits = gx.node_index("dense");
  std::mt19937_64 rng(4);
  std::normal_distribution<float> nd(0.f, 1.f);
  Tensor x = Tensor::empty(Shape{2, 7, 7, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
  Tensor labels = Tensor::empty(Shape{2}, DType::I32);
  labels.i32()[0] = 1, labels.i32()[1] = 3;
  auto loss_value = [&] {
    gx.forward(x, true, logits);
    Tensor none;
    return loss->cross_entropy(gx.output(logits), labels, none, 1.f).loss_sum / 2.0;
  };

  gx.forward(x, true, logits);
  Tensor& dl = gx.grad(logits);
  loss->cross_entropy(gx.output(logits), labels, dl, 0.5f);
  gx.backward(dl, logits);
  std::vector<float> analytic(gx.params().grads().f32(), gx.params().grads().f32() + gx.params().trainable_floats());
  float* w = gx.params().weights().f32();
  int checked = 0;
  for (const ParamEntry& e : gx.params().entries()) {
    int64_t n = e.spec.shape.numel();
    for (int64_t k = 0; k < std::min<int64_t>(n, 12); ++k) {
      int64_t i = e.offset + (k * 7919) % n;
      const double eps = 2e-3;
      float saved = w[i];
      w[i] = saved + float(eps);
      double up = loss_value();
      w[i] = saved - float(eps);
      double down = loss_value();
      w[i] = saved;
      double fd = (up - down) / (2 * eps), an = analytic[size_t(i)];
      INFO(e.name << "[" << (i - e.offset) << "]: finite difference " << fd << ", backprop " << an);
      CHECK(std::abs(fd - an) <= 3e-2 * std::max(std::abs(fd), std::abs(an)) + 5e-4);
      ++checked;
    }
  }
  CHECK(checked == 58);  // up to 12 values of each of the 7 parameters
}

TEST_CASE("graph: multiply's shapes (the same, a gate broadcast over the leading axes, a scalar) and its errors") {
  auto net = [](const std::string& gate_shape_layers, const std::string& multiply) {
    return "model:\n  input: [6, 6, 4]\n  layers:\n    - {name: c, type: conv2d, filters: 4, kernel: 1}\n" + gate_shape_layers +
           "    - " + multiply + "\n";
  };
  const std::string gap = "    - {name: g, type: global_avg_pool2d, inputs: [c]}\n";
  Graph a = build(net(gap, "{name: m, type: multiply, inputs: [c, g]}"));
  CHECK(shape_of(a, "m") == Shape{6, 6, 4});
  Graph b = build(net(gap, "{name: m, type: multiply, inputs: [g, c]}"));  // either order
  CHECK(shape_of(b, "m") == Shape{6, 6, 4});
  const std::string pooled = "    - {name: p, type: global_avg_pool2d, inputs: [c]}\n";
  Graph one = build(net(pooled + "    - {name: g, type: dense, units: 1}\n", "{name: m, type: multiply, inputs: [c, g]}"));
  CHECK(shape_of(one, "m") == Shape{6, 6, 4});
  CHECK_THAT(error_of(net(pooled + "    - {name: g, type: dense, units: 3}\n", "{name: m, type: multiply, inputs: [c, g]}")),
             Catch::StartsWith("test.yaml:7:") && Catch::Contains("multiply 'm': input shapes 6x6x4 and 3 neither agree nor broadcast") );
  CHECK_THAT(error_of(net(gap, "{name: m, type: multiply, inputs: [c, g, c]}")), Catch::Contains("multiply"));
}
