// A model run on the CPU for the layer tests: forward, backward from the last layer with a given gradient, the output and every parameter gradient; weights copied between models.
#pragma once
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/executor.h"
#include "core/graph/graph.h"
#include "graph_test_util.h"

namespace trainer::test {

// One model on the CPU with `threads` threads: the executor, its context, and its layers' outputs.
struct Net {
  std::unique_ptr<OpContext> ctx;
  std::unique_ptr<Executor> ex;
  Net(const std::string& yaml, int threads, FastPaths fast = FastPaths::defaults())
      : ctx(make_context(Device::cpu(), options(threads, fast))) {
    ex = std::make_unique<Executor>(std::make_shared<const Graph>(build(yaml)), *ctx, 5);
  }
  // Forward on x (the model's input, any shape of its element count), then backward from the last
  // layer with dy; returns the last layer's output and every parameter gradient.
  std::pair<std::vector<float>, std::vector<float>> run(const std::vector<float>& x, const Shape& xs,
                                                         const std::vector<float>& dy) {
    Tensor xt = Tensor::empty(xs);
    std::memcpy(xt.f32(), x.data(), x.size() * sizeof(float));
    const int out = ex->node_index(ex->graph().nodes().back().layer->name());
    ex->forward(xt, true);
    const Tensor& y = ex->output(out);
    std::vector<float> yv(y.f32(), y.f32() + y.numel());
    Tensor& d = ex->grad(out);
    REQUIRE(size_t(d.numel()) == dy.size());
    std::memcpy(d.f32(), dy.data(), dy.size() * sizeof(float));
    ex->backward(d, out);
    ParamStore& p = ex->params();
    return {yv, std::vector<float>(p.grads().f32(), p.grads().f32() + p.trainable_floats())};
  }
  static ContextOptions options(int threads, FastPaths fast) {
    ContextOptions o;
    o.threads = threads;
    o.fast = fast;
    return o;
  }
  void copy_weights_from(Net& o) {
    REQUIRE(ex->params().trainable_floats() == o.ex->params().trainable_floats());
    std::memcpy(ex->params().weights().f32(), o.ex->params().weights().f32(),
                size_t(o.ex->params().trainable_floats()) * sizeof(float));
  }
};

// A graph run once on the CPU for the shape layers' tests: a random input forward in training
// mode; then backward from one node with a random dy, capturing the gradient that reaches another
// node before that node's backward runs.
struct Probe {
  std::unique_ptr<OpContext> ctx = make_context(Device::cpu(), ContextOptions{2});
  std::unique_ptr<Executor> ex;
  std::mt19937_64 rng{9};
  std::vector<float> dy, grad_at;  // after backward(): the dy given, and the gradient captured
  Tensor x;                        // the input (backward reads it)

  Probe(const std::string& yaml, const Shape& input) {
    ex = std::make_unique<Executor>(std::make_shared<const Graph>(build(yaml)), *ctx, 3);
    std::normal_distribution<float> nd(0.f, 1.f);
    x = Tensor::empty(input);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
    ex->forward(x, true);
  }
  const Tensor& out(const std::string& node) const { return ex->output(ex->node_index(node)); }
  void backward(const std::string& from, const std::string& at) {
    const int f = ex->node_index(from), a = ex->node_index(at);
    Tensor& d = ex->grad(f);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] = nd(rng);
    dy.assign(d.f32(), d.f32() + d.numel());
    GraphHooks h;
    h.before_backward = [&](int node) {
      if (node == a) grad_at.assign(ex->grad(a).f32(), ex->grad(a).f32() + ex->grad(a).numel());
    };
    ex->set_hooks(h);
    ex->backward(d, f);
    ex->set_hooks(GraphHooks());
    REQUIRE(!grad_at.empty());
  }
};

inline std::vector<float> randoms(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

}  // namespace trainer::test
