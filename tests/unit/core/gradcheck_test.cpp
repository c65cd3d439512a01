// A whole small graph (conv, batchnorm, tanh or gelu, pooling, concat, add, dense, softmax; and a
// sequence's: dense per position, position_embedding, layer_norm, self- and cross-attention, gelu,
// residual adds)
// against central finite differences of its loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/graph/executor.h"
#include "core/graph/graph.h"
#include "core/ops/softmax.h"

using namespace trainer;

namespace {

const std::string kNet = R"(
model:
  input: [9, 9, 3]
  layers:
    - {name: c1, type: conv2d, filters: 4, kernel: 3, strides: 2, padding: same}
    - {name: bn, type: batchnorm}
    - {name: t1, type: tanh}
    - {name: left, type: conv2d, filters: 3, kernel: 1, inputs: [t1]}
    - {name: right, type: max_pool2d, pool: 2, strides: 1, padding: same, inputs: [t1]}
    - {name: right2, type: conv2d, filters: 3, kernel: [3, 2], padding: same}
    - {name: cat, type: concat, inputs: [left, right, right2]}
    - {name: sum, type: add, inputs: [cat, cat]}
    - {name: t2, type: sigmoid}
    - {name: pool, type: avg_pool2d, pool: 2, padding: same}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";

struct Setup {
  std::unique_ptr<OpContext> ctx = make_context(Device::cpu(), {2});
  std::unique_ptr<Executor> g;
  std::unique_ptr<SoftmaxKernel> loss;
  Tensor x, labels;
  int logits = 0;

  // `net`: kNet, or it with its activations replaced, or another net on 3 samples of `sample`.
  explicit Setup(const std::string& net = kNet, const std::vector<int64_t>& sample = {9, 9, 3}) {
    auto doc = cfg::parse_document(net, "gradcheck.yaml");
    g = std::make_unique<Executor>(std::make_shared<const Graph>(parse_model(cfg::root(doc).child("model"))), *ctx, 5);
    loss = make_kernel<SoftmaxKernel>(*ctx, {});
    logits = g->node_index("dense");
    std::mt19937_64 rng(9);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<int64_t> dims{3};
    dims.insert(dims.end(), sample.begin(), sample.end());
    x = Tensor::empty(Shape(dims));
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = n(rng);
    labels = Tensor::empty(Shape{3}, DType::I32);
    for (int i = 0; i < 3; ++i) labels.i32()[i] = int32_t(rng() % 5);
  }
  double loss_value() {
    g->forward(x, true, logits);
    Tensor none;
    return loss->cross_entropy(g->output(logits), labels, none, 1.f).loss_sum / 3.0;
  }
};

// Every trainable parameter's gradient (12 entries of each) against central differences. `steps`:
// the differences' half-widths; the gradient must agree with one of them. A net of kinked layers
// (maximum, minimum, prelu at 0) passes a second, smaller step: a difference whose interval
// straddles a kink is off by the slopes' jump, and the smaller interval rarely straddles it too,
// while a wrong gradient misses at every step.
void check_gradients(Setup& s, const std::vector<double>& steps = {2e-3}) {
  s.g->forward(s.x, true, s.logits);
  Tensor& dl = s.g->grad(s.logits);
  s.loss->cross_entropy(s.g->output(s.logits), s.labels, dl, 1.f / 3.f);
  s.g->backward(dl, s.logits);
  std::vector<float> analytic(s.g->params().grads().f32(), s.g->params().grads().f32() + s.g->params().trainable_floats());

  float* w = s.g->params().weights().f32();
  int checked = 0;
  for (const ParamEntry& e : s.g->params().entries()) {
    if (!e.spec.trainable) continue;
    int64_t n = e.spec.shape.numel();
    for (int64_t k = 0; k < std::min<int64_t>(n, 12); ++k) {
      int64_t i = e.offset + (k * 7919) % n;
      const double an = analytic[size_t(i)];
      bool agrees = false;
      std::string fds;
      for (double eps : steps) {
        float saved = w[i];
        w[i] = saved + float(eps);
        double up = s.loss_value();
        w[i] = saved - float(eps);
        double down = s.loss_value();
        w[i] = saved;
        const double fd = (up - down) / (2 * eps);
        fds += " " + std::to_string(fd);
        agrees = agrees || std::abs(fd - an) <= 3e-2 * std::max(std::abs(fd), std::abs(an)) + 5e-4;
      }
      INFO(e.name << "[" << (i - e.offset) << "]: finite differences" << fds << ", backprop " << an);
      CHECK(agrees);
      ++checked;
    }
  }
  CHECK(checked > 60);
}

std::string replaced(std::string net, const std::string& from, const std::string& to) {
  const size_t at = net.find(from);
  REQUIRE(at != std::string::npos);
  return net.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("gradcheck: a whole small graph's gradients match finite differences") {
  Setup s;
  check_gradients(s);
}

TEST_CASE("gradcheck: with GELU (exact and tanh form), whose backward reads x: the graph keeps it and the gradients match") {
  // gelu after batch norm, where tanh ran in place over bn's output; its backward needs that x.
  std::string net = replaced(kNet, "{name: t1, type: tanh}", "{name: t1, type: gelu}");
  net = replaced(net, "{name: t2, type: sigmoid}", "{name: t2, type: gelu, approximate: true}");
  // An average pool for the max pool: with GELU before it, c1/kernel[70] sat within eps of a max
  // pool's switch (finite differences 0.158, 0.181, 0.193 at eps 1e-3, 2e-3, 4e-3; backprop 0.137,
  // which eps 5e-4 agreed with): a kink of the max, not of GELU, which is smooth.
  net = replaced(net, "type: max_pool2d", "type: avg_pool2d");
  Setup s(net);
  CHECK(s.g->layer(s.g->node_index("t1")).activation() == ActKind::Gelu);
  CHECK(s.g->layer(s.g->node_index("t2")).activation() == ActKind::GeluTanh);
  check_gradients(s);
}

TEST_CASE("gradcheck: with SiLU (swish), whose backward reads x: the graph keeps it and the gradients match") {
  std::string net = replaced(kNet, "{name: t1, type: tanh}", "{name: t1, type: silu}");
  net = replaced(net, "{name: t2, type: sigmoid}", "{name: t2, type: activation, function: swish}");
  net = replaced(net, "type: max_pool2d", "type: avg_pool2d");  // as with GELU: no max's kink near a sample
  Setup s(net);
  CHECK(s.g->layer(s.g->node_index("t1")).activation() == ActKind::Silu);
  CHECK(s.g->layer(s.g->node_index("t2")).activation() == ActKind::Silu);
  check_gradients(s);
}

TEST_CASE("gradcheck: with mish, softplus and elu (Keras 3's smooth activations, backward from x): the gradients match") {
  // The ones with a continuous derivative: leaky_relu, selu, hard_sigmoid and hard_silu have kinks
  // a finite difference cannot straddle (their derivatives are checked against float64 by the op tests).
  for (const char* t1 : {"{name: t1, type: activation, function: mish}", "{name: t1, type: elu}"}) {
    INFO(t1);
    std::string net = replaced(kNet, "{name: t1, type: tanh}", t1);
    net = replaced(net, "{name: t2, type: sigmoid}", "{name: t2, type: activation, activation: softplus}");
    net = replaced(net, "type: max_pool2d", "type: avg_pool2d");  // as with GELU: no max's kink near a sample
    Setup s(net);
    CHECK(s.g->layer(s.g->node_index("t2")).activation() == ActKind::Softplus);
    check_gradients(s);
  }
}

TEST_CASE("gradcheck: a transformer block on a sequence (dense per position, position_embedding, layer_norm, causal "
          "self-attention, cross-attention, gelu, residuals)") {
  const std::string net = R"(
model:
  input: [6, 5]
  layers:
    - {name: proj0, type: dense, units: 8}
    - {name: proj, type: position_embedding, sequence_length: 9}
    - {name: ln1, type: layer_norm}
    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 4, causal: true}
    - {name: res1, type: add, inputs: [proj, attn]}
    - {name: cross, type: multi_head_attention, num_heads: 3, key_dim: 2, value_dim: 3, inputs: [res1, ln1]}
    - {name: mlp, type: dense, units: 8}
    - {name: act, type: gelu}
    - {name: back, type: dense, units: 8}
    - {name: res, type: add, inputs: [res1, back]}
    - {name: ln2, type: layer_norm, center: false, epsilon: 1e-5}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net, {6, 5});
  check_gradients(s);
  // With dropout on the attention probabilities (a fixed step seed: one mask, redrawn in backward),
  // the gradients are those of the dropped network.
  std::string dropped = replaced(net, "key_dim: 4, causal: true}", "key_dim: 4, causal: true, dropout: 0.3}");
  dropped = replaced(dropped, "value_dim: 3, inputs:", "value_dim: 3, dropout: 0.5, inputs:");
  Setup d(dropped, {6, 5});
  d.g->set_step_seed(77);
  check_gradients(d);
  // ... and dropout is in force: the training forward differs from the undropped one.
  d.g->forward(d.x, true, d.logits);
  std::vector<float> on(d.g->output(d.logits).f32(), d.g->output(d.logits).f32() + d.g->output(d.logits).numel());
  d.g->forward(d.x, false, d.logits);
  std::vector<float> off(d.g->output(d.logits).f32(), d.g->output(d.logits).f32() + d.g->output(d.logits).numel());
  CHECK(on != off);
}

// Keras's GlobalAveragePooling1D / GlobalMaxPooling1D over a sequence's time axis, and
// GlobalMaxPooling2D over an image, in place of a flatten: finite differences agree (the max's
// gradient goes to each column's maximum: random values keep every maximum eps clear of the rest).
TEST_CASE("gradcheck: global_avg_pool1d, global_max_pool1d and global_max_pool2d") {
  const std::string seq = R"(
model:
  input: [6, 5]
  layers:
    - {name: proj0, type: dense, units: 8}
    - {name: act, type: tanh}
    - {name: mix, type: dense, units: 8}
    - {name: act2, type: tanh}
    - {name: mix2, type: dense, units: 8}
    - {name: pool, type: global_avg_pool1d}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  for (const char* pool : {"global_avg_pool1d", "global_max_pool1d"}) {
    INFO(pool);
    Setup s(replaced(seq, "global_avg_pool1d", pool), {6, 5});
    CHECK(s.g->graph().nodes()[size_t(s.g->node_index("pool"))].shape == Shape{8});
    check_gradients(s);
  }
  // (kNet's max pool made an average pool, as for GELU: no kink of its own near a sample.)
  Setup img(replaced(replaced(kNet, "{name: flat, type: flatten}", "{name: flat, type: global_max_pool2d}"),
                     "type: max_pool2d", "type: avg_pool2d"));
  CHECK(img.g->graph().nodes()[size_t(img.g->node_index("flat"))].shape == Shape{10});
  check_gradients(img);
}

// A squeeze-and-excitation block (MobileNetV3's, EfficientNet's): a gate [C] from the pooled image,
// multiplied into every pixel (multiply broadcasting [C] over [H, W, C]), then a same-shape multiply.
TEST_CASE("gradcheck: multiply, a squeeze-and-excitation gate broadcast over an image and a same-shape product") {
  const std::string net = R"(
model:
  input: [9, 9, 3]
  layers:
    - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: same}
    - {name: t1, type: tanh}
    - {name: squeeze, type: global_avg_pool2d}
    - {name: e1, type: dense, units: 2}
    - {name: e1a, type: silu}
    - {name: e2, type: dense, units: 4}
    - {name: gate, type: sigmoid}
    - {name: excited, type: multiply, inputs: [t1, gate]}
    - {name: c2, type: conv2d, filters: 4, kernel: 1, inputs: [t1]}
    - {name: both, type: multiply, inputs: [c2, excited]}
    - {name: pool, type: avg_pool2d, pool: 3}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net);
  CHECK(s.g->graph().nodes()[size_t(s.g->node_index("excited"))].shape == Shape{9, 9, 4});
  check_gradients(s);
}

// The attention layers' backward temporaries (the gradients of o, q, k, v and the key/value input's
// two parts) are the executor's, one set for all of them (Layer::transient): a third attention
// layer, as large as the first, adds nothing; gradcheck above shows that layers of other shapes
// sharing them still get their own gradients right.
TEST_CASE("gradcheck: the attention layers of an executor share one set of backward temporaries") {
  const std::string one = R"(
model:
  input: [6, 8]
  layers:
    - {name: ln1, type: layer_norm}
    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 4, causal: true}
    - {name: res1, type: add, inputs: [ln1, attn]}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  const std::string two = replaced(one, "    - {name: res1, type: add, inputs: [ln1, attn]}\n",
                                   "    - {name: res1, type: add, inputs: [ln1, attn]}\n"
                                   "    - {name: attn2, type: multi_head_attention, num_heads: 2, key_dim: 4}\n"
                                   "    - {name: res2, type: add, inputs: [res1, attn2]}\n");
  auto backward_once = [](Setup& s) {
    s.g->forward(s.x, true, s.logits);
    Tensor& dl = s.g->grad(s.logits);
    s.loss->cross_entropy(s.g->output(s.logits), s.labels, dl, 1.f / 3.f);
    s.g->backward(dl, s.logits);
    return s.g->transient_bytes();
  };
  Setup a(one, {6, 8}), b(two, {6, 8});
  REQUIRE(b.g->node_index("attn2") >= 0);
  const size_t bytes_one = backward_once(a), bytes_two = backward_once(b);
  // B 3, T 6: do, dq, dk, dv [3, 6, 8] and the input's two parts [3, 6, 8], f32.
  CHECK(bytes_one >= size_t(6 * 3 * 6 * 8 * 4));
  CHECK(bytes_two == bytes_one);
}

// A head tied to the token embedding (dense `tie:`): the table's gradient is its lookup's plus the
// head's (transposed), summed after the embedding's backward.
TEST_CASE("gradcheck: a dense head tied to the token embedding (tie:): the table's gradient adds both uses") {
  const std::string net = R"(
model:
  input: [5]
  layers:
    - {name: tok, type: embedding, input_dim: 5, output_dim: 8}
    - {name: pos, type: position_embedding}
    - {name: ln, type: layer_norm}
    - {name: head, type: dense, units: 5, tie: tok}
    - {name: act, type: tanh}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net, {5});
  for (int64_t i = 0; i < s.x.numel(); ++i) s.x.f32()[i] = float((i * 3) % 5);  // ids, every one used
  REQUIRE(s.g->params().entries().size() == 7);  // tok/embeddings once, pos, ln (2), head/bias, dense (2)
  check_gradients(s);
}

// A decoder's upsampling (Keras's Conv2DTranspose): stride 2 'same' with the activation key, then
// valid with output_padding and a kernel smaller than its stride (rows no input reaches: bias only).
TEST_CASE("gradcheck: conv2d_transpose (same, valid, output_padding, a kernel below its stride) in a decoder") {
  const std::string net = R"(
model:
  input: [4, 3, 2]
  layers:
    - {name: c1, type: conv2d, filters: 3, kernel: 3, padding: same}
    - {name: up1, type: conv2d_transpose, filters: 4, kernel: 3, strides: 2, padding: same, activation: tanh}
    - {name: up2, type: conv2d_transpose, filters: 2, kernel: [2, 1], strides: [2, 3], output_padding: [1, 0]}
    - {name: pool, type: avg_pool2d, pool: 2}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net, {4, 3, 2});
  CHECK(s.g->graph().nodes()[size_t(s.g->node_index("up1"))].shape == Shape{8, 6, 4});
  CHECK(s.g->graph().nodes()[size_t(s.g->node_index("up2"))].shape == Shape{17, 16, 2});  // Keras: (in - 1)·s + k + output_padding
  check_gradients(s);
}

TEST_CASE("gradcheck: up_sampling2d, bilinear (a factor of 2 and of 3, one row input)") {
  const std::string net = R"(
model:
  input: [4, 3, 2]
  layers:
    - {name: c1, type: conv2d, filters: 3, kernel: 2, padding: same, activation: tanh}
    - {name: up, type: up_sampling2d, size: [2, 3], interpolation: bilinear}
    - {name: c2, type: conv2d, filters: 2, kernel: 3, strides: 2}
    - {name: c3, type: conv2d, filters: 6, kernel: 1, activation: tanh}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net, {4, 3, 2});
  CHECK(s.g->graph().nodes()[size_t(s.g->node_index("up"))].shape == Shape{8, 9, 3});
  check_gradients(s);
}

// The kinks of maximum, minimum and prelu at 0 make a difference that straddles one wrong by the
// slopes' jump: the second step (check_gradients) and a net whose branches rarely near-tie within
// both steps (maximum over three of these branches has one a few 1e-5 apart, at c2's kernel[0]:
// its differences move towards backprop as the step shrinks, -0.0246, -0.0243, -0.0226, -0.0205
// against -0.0216). The merges' other cases (2 to 64 inputs, ties) are the op's tests.
TEST_CASE("gradcheck: prelu (per channel, per position, one slope) and subtract, average, maximum, minimum") {
  const std::string net = R"(
model:
  input: [9, 9, 3]
  layers:
    - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: same}
    - {name: p1, type: prelu, shared_axes: [1, 2], alpha_initializer: {type: random_uniform, minval: -0.5, maxval: 0.8}}
    - {name: c2, type: conv2d, filters: 4, kernel: 3, padding: same, inputs: [input]}
    - {name: p2, type: prelu, alpha_initializer: {type: random_uniform, minval: 0.1, maxval: 0.9}}
    - {name: c3, type: conv2d, filters: 4, kernel: 1, inputs: [input]}
    - {name: p3, type: prelu, shared_axes: [1, 2, 3], alpha_initializer: {type: constant, value: 0.3}}
    - {name: diff, type: subtract, inputs: [p1, p2]}
    - {name: mean, type: average, inputs: [diff, p2, p3]}
    - {name: hi, type: maximum, inputs: [p1, p2]}
    - {name: lo, type: minimum, inputs: [c1, c3]}
    - {name: all, type: concat, inputs: [mean, hi, lo]}
    - {name: pool, type: avg_pool2d, pool: 3}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net);
  CHECK(s.g->graph().nodes()[size_t(s.g->node_index("p1"))].layer->params()[0].shape == Shape{1, 1, 4});
  check_gradients(s, {2e-3, 4e-4});
}

TEST_CASE("gradcheck: group_norm on an image (2 channels a group) and on a vector (one group, no beta)") {
  const std::string net = R"(
model:
  input: [9, 9, 3]
  layers:
    - {name: c1, type: conv2d, filters: 6, kernel: 3, strides: 2, padding: same}
    - {name: gn, type: group_norm, groups: 3, gamma_initializer: {type: random_uniform, minval: 0.5, maxval: 1.5}, beta_initializer: {type: random_uniform, minval: -0.5, maxval: 0.5}}
    - {name: t1, type: tanh}
    - {name: pool, type: avg_pool2d, pool: 2, padding: same}
    - {name: flat, type: flatten}
    - {name: d1, type: dense, units: 8}
    - {name: gn2, type: group_norm, groups: 1, center: false, gamma_initializer: {type: random_uniform, minval: 0.5, maxval: 1.5}}
    - {name: t2, type: tanh}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";
  Setup s(net);
  check_gradients(s);
}
