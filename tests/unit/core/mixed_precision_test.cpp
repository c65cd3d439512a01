// Mixed precision in the graph on every device: which nodes keep bf16/f16 activations, the conversions between types, and gradients that match fp32's.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/graph/executor.h"
#include "core/run/spec.h"
#include "graph_test_util.h"
#include "test_devices.h"
#include "transformer_block.h"

using namespace trainer;

namespace {

// conv -> bn -> tanh (bf16, in place) -> depthwise -> dropout (f32 only; rate 0: the identity) ->
// bn -> sigmoid -> conv -> add with tanh's output -> pool -> flatten -> dense -> softmax. The model
// input is converted for c1; the depthwise convolution's bf16 output is converted up for dropout;
// sigmoid's f32 output down for c2; dense's bf16 output up for softmax (a trainer keeps the
// logits' dense f32: Replica::keep_f32, the keep_f32 case below).
// Every function is smooth: a gradient of relu or max pooling jumps where rounding moves a value
// across zero or reorders two near-equal values (a few elements here flip that way, 6% of the
// gradient's norm), so it would not compare with fp32's; the op tests check those kernels.
// c1 and dw have no bias: batch norm follows them (through the identity), so its exact gradient
// is zero and both precisions would compare rounding noise.
const char* kNet =
    "model:\n  input: [6, 6, 3]\n  layers:\n"
    "    - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: same, use_bias: false}\n"
    "    - {name: bn1, type: batchnorm}\n"
    "    - {name: r1, type: tanh}\n"
    "    - {name: dw, type: depthwise_conv2d, kernel: 3, padding: same, use_bias: false}\n"
    "    - {name: drop, type: dropout, rate: 0.0}\n"
    "    - {name: bn2, type: batchnorm}\n"
    "    - {name: r2, type: sigmoid}\n"
    "    - {name: c2, type: conv2d, filters: 4, kernel: 1}\n"
    "    - {name: sum, type: add, inputs: [r1, c2]}\n"
    "    - {name: pool, type: avg_pool2d, pool: 2}\n"
    "    - {name: flat, type: flatten}\n"
    "    - {name: dense, type: dense, units: 3}\n"
    "    - {name: out, type: softmax}\n";

struct Run {
  std::unique_ptr<OpContext> ctx;
  std::unique_ptr<Executor> exec;
  Executor& g;
  Tensor x, dy;
  Run(std::unique_ptr<OpContext> c, std::unique_ptr<Executor> e) : ctx(std::move(c)), exec(std::move(e)), g(*exec) {}
};

// A model of its own, its input of one sample and its output's width.
struct Net {
  const char* yaml;
  Shape input;
  int64_t outputs;
};
const Net kCnn{kNet, Shape{6, 6, 3}, 3};
const Net kBlock{test::kTransformerBlockModel, Shape{6, 5}, 5};  // transformer_block.h

// `net` (kNet unless given) on `device` at `p`, seed 3, a fixed batch of 4 and a fixed output
// gradient; forward and backward run. fp32 is strict on a GPU (no TF32: the reference for the low
// precisions).
// `typed`: Executor::set_typed_io; `pass`: Executor::set_grad_pass.
std::unique_ptr<Run> run(Device device, Precision p, const std::vector<std::string>& keep = {}, const Net& net = kCnn,
                         bool typed = true, bool pass = true) {
  ContextOptions o{device.is_cpu() ? 2 : 0, p};
  auto ctx = make_context(device, o);
  auto exec = std::make_unique<Executor>(std::make_shared<const Graph>(test::build(net.yaml)), *ctx, 3);
  auto r = std::make_unique<Run>(std::move(ctx), std::move(exec));
  Executor& g = r->g;
  for (const std::string& n : keep) g.keep_f32(g.node_index(n));
  g.set_typed_io(typed);
  g.set_grad_pass(pass);
  g.set_input_grad(0, true);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<int64_t> in = net.input.dims();
  in.insert(in.begin(), 4);
  r->x = r->ctx->empty(Shape(in));
  r->dy = r->ctx->empty(Shape{4, net.outputs});
  std::vector<float> x(size_t(r->x.numel())), dy(size_t(r->dy.numel()));
  for (float& v : x) v = nd(rng);
  for (float& v : dy) v = nd(rng);
  r->ctx->copy_from_host(r->x.data(), x.data(), r->x.bytes());
  r->ctx->copy_from_host(r->dy.data(), dy.data(), r->dy.bytes());
  g.forward(r->x, true);
  g.backward(r->dy, g.output_node());
  return r;
}

std::vector<float> host(Run& r, const Tensor& t) { return test::host_floats(*r.ctx, t); }

// |a - b| / |b| over two f32 arrays (Euclidean norms).
double rel_error(const float* a, const float* b, int64_t n) {
  double d = 0, s = 0;
  for (int64_t i = 0; i < n; ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    s += double(b[i]) * b[i];
  }
  return std::sqrt(d / s);
}

}  // namespace

TEST_CASE("mixed precision: convolutions and the memory-bound layers after them keep the low type, the rest f32", "[backends]") {
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    const Device dev = mc.device();
    const Precision p = mc.precision;
    auto half = run(dev, p), full = run(dev, Precision::FP32);
    auto type = [](Run& r, const char* n) { return r.g.dtype(r.g.node_index(n)); };
    for (const char* n : {"c1", "bn1", "r1", "dw", "c2", "sum", "pool", "flat", "dense"}) {
      INFO(n);
      CHECK(type(*half, n) == low_dtype(p));
      CHECK(type(*full, n) == DType::F32);
    }
    for (const char* n : {"drop", "bn2", "r2", "out"}) {  // dropout is f32-only; bn2, r2 follow it
      INFO(n);
      CHECK(type(*half, n) == DType::F32);
    }
    // in place:
    CHECK(half->g.output(half->g.node_index("r1")).data() == half->g.output(half->g.node_index("bn1")).data());
    CHECK(half->g.input_grad(0).dtype() == DType::F32);  // the model input's type
    // The bf16 activations take half the bytes; the converted copies (the input for c1, dw for drop,
    // r2 for c2) add some back.
    INFO("activation bytes: bf16 " << half->g.activation_bytes() << ", fp32 " << full->g.activation_bytes());
    CHECK(half->g.activation_bytes() < full->g.activation_bytes());
    CHECK(half->g.gradient_bytes() < full->g.gradient_bytes());
  }
}

TEST_CASE("mixed precision: keep_f32 makes a node f32 and converts its low-precision inputs", "[backends]") {
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    const Device dev = mc.device();
    const Precision p = mc.precision;
    auto r = run(dev, p, {"sum", "dense"});
    CHECK(r->g.dtype(r->g.node_index("sum")) == DType::F32);
    CHECK(r->g.dtype(r->g.node_index("pool")) == DType::F32);  // follows sum
    CHECK(r->g.dtype(r->g.node_index("c2")) == low_dtype(p));
    CHECK(r->g.dtype(r->g.node_index("dense")) == DType::F32);  // as the logits in training
  }
}

TEST_CASE("mixed precision: outputs and every gradient match fp32 within bf16 (f16) rounding", "[backends]") {
  // Each bf16 store rounds to 8 significant bits (relative 2^-8 at most, about 2^-9.5 on average
  // over many values); through a dozen layers forward and back the errors add up to about 2^-7 in
  // norm (measured: output 0.0016, parameter tensors 0.0015 to 0.011). A gradient that misses a
  // path (a conversion not added into the producer's gradient, the two contributions to r1's
  // gradient not summed) or lands in the wrong buffer is off by tens of percent. f16 keeps 11
  // significant bits: its errors are 8 times smaller, under the same bounds.
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    const Device dev = mc.device();
    const Precision p = mc.precision;
    for (std::vector<std::string> keep : {std::vector<std::string>{}, std::vector<std::string>{"sum", "c1"}}) {
      auto half = run(dev, p, keep), full = run(dev, Precision::FP32, keep);
      const std::vector<float> yh = host(*half, half->g.output(half->g.output_node()));
      const std::vector<float> yf = host(*full, full->g.output(full->g.output_node()));
      const std::vector<float> wh = host(*half, half->g.params().grads()), wf = host(*full, full->g.params().grads());
      const std::vector<float> xh = host(*half, half->g.input_grad(0)), xf = host(*full, full->g.input_grad(0));
      double ey = rel_error(yh.data(), yf.data(), int64_t(yf.size()));
      double ew = rel_error(wh.data(), wf.data(), full->g.params().trainable_floats());
      double ex = rel_error(xh.data(), xf.data(), full->x.numel());
      INFO("kept f32: " << keep.size() << " nodes; relative errors: output " << ey << ", weight gradients " << ew
                        << ", input gradient " << ex);
      CHECK(ey < 0x1p-7);
      CHECK(ew < 0x1p-5);
      CHECK(ex < 0x1p-5);
      // Per parameter tensor too: one wrong tensor could hide in the whole's norm.
      for (const ParamEntry& e : full->g.params().entries()) {
        if (!e.spec.trainable) continue;
        double ep = rel_error(wh.data() + e.offset, wf.data() + e.offset, e.spec.shape.numel());
        INFO(e.name << ": " << ep);
        CHECK(ep < 0x1p-5);
      }
    }
  }
}

TEST_CASE("mixed precision: a changed batch size replans the buffers and gives the same results", "[backends]") {
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    const Device dev = mc.device();
    const Precision p = mc.precision;
    auto r = run(dev, p);
    const std::vector<float> y1 = host(*r, r->g.output(r->g.output_node()));
    Tensor x2 = r->x.slice(0, 2);
    r->g.forward(x2, true);
    r->g.forward(r->x, true);
    const std::vector<float> again = host(*r, r->g.output(r->g.output_node()));
    REQUIRE(again.size() == y1.size());
    for (size_t i = 0; i < again.size(); ++i) REQUIRE(again[i] == y1[i]);
  }
}

// A pre-norm transformer block (transformer_block.h): attention and the dense layers compute in the
// low type as the convolutions do (attention's q, k, v and o held in it, its scores and softmax
// f32 inside), layer norm and the residual adds keep f32 (a residual stream in f32, as PyTorch's
// autocast keeps it), and every gradient is fp32's within the low type's rounding, under the CNN's
// bounds. Without the attention's low path a gradient through it lands in the wrong type's buffer
// and is garbage; a lost path (the key/value input gradient not added to the query's) is off by
// tens of percent.
TEST_CASE("mixed precision: a transformer block's attention and dense layers compute in the low type, its gradients within rounding of fp32's", "[backends]") {
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    const Device dev = mc.device();
    const Precision p = mc.precision;
    auto half = run(dev, p, {}, kBlock), full = run(dev, Precision::FP32, {}, kBlock);
    auto type = [&](const char* n) { return half->g.dtype(half->g.node_index(n)); };
    for (const char* n : {"proj", "attn", "mlp", "act", "dense"}) {
      INFO(n);
      CHECK(type(n) == low_dtype(p));
    }
    for (const char* n : {"pos", "ln1", "res1", "ln2", "res2", "flat", "softmax"}) {
      INFO(n);
      CHECK(type(n) == DType::F32);
    }
    const std::vector<float> yh = host(*half, half->g.output(half->g.output_node()));
    const std::vector<float> yf = host(*full, full->g.output(full->g.output_node()));
    const std::vector<float> wh = host(*half, half->g.params().grads()), wf = host(*full, full->g.params().grads());
    const std::vector<float> xh = host(*half, half->g.input_grad(0)), xf = host(*full, full->g.input_grad(0));
    const double ey = rel_error(yh.data(), yf.data(), int64_t(yf.size()));
    const double ex = rel_error(xh.data(), xf.data(), full->x.numel());
    INFO("relative errors: output " << ey << ", input gradient " << ex);
    CHECK(ey < 0x1p-7);
    CHECK(ex < 0x1p-5);
    // The key's bias adds q_i·b to every score of row i: the softmax does not see it, so its exact
    // gradient is 0 and both precisions give rounding noise; it is compared with the whole's norm.
    const ParamEntry* key_bias = nullptr;
    for (const ParamEntry& e : full->g.params().entries()) {
      if (!e.spec.trainable) continue;
      if (e.name == "attn/key/bias") {
        key_bias = &e;
        continue;
      }
      const double ep = rel_error(wh.data() + e.offset, wf.data() + e.offset, e.spec.shape.numel());
      INFO(e.name << ": " << ep);
      CHECK(ep < 0x1p-5);
    }
    REQUIRE(key_bias);
    double kb = 0, all = 0;
    for (int64_t i = 0; i < key_bias->spec.shape.numel(); ++i) kb += double(wh[size_t(key_bias->offset + i)]) * wh[size_t(key_bias->offset + i)];
    for (float v : wf) all += double(v) * v;
    INFO("attn/key/bias's gradient: " << std::sqrt(kb) << ", every gradient's norm " << std::sqrt(all));
    CHECK(std::sqrt(kb) < 0x1p-7 * std::sqrt(all));
  }
}

// A residual add (f32) joined by a low-type branch (the attention's output) reads that branch as
// it is where its backend adds mixed types (Layer::reads_input_as) and writes its gradient
// converted from its own (Layer::writes_input_grad_as), where the executor converted copies: the
// same arithmetic, so the output and every gradient have the same bits as with the executor's.
TEST_CASE("mixed precision: an add reads a low-type input as it is and writes its gradient converted, the same bits as the executor's separate conversions", "[backends]") {
  for (const test::MixedCase& mc : test::mixed_cases()) SECTION(mc.name()) {
    auto direct = run(mc.device(), mc.precision, {}, kBlock, true), apart = run(mc.device(), mc.precision, {}, kBlock, false);
    const int res1 = direct->g.node_index("res1"), attn = direct->g.node_index("attn");
    REQUIRE(direct->g.dtype(res1) == DType::F32);
    REQUIRE(direct->g.dtype(attn) == low_dtype(mc.precision));
    CHECK(host(*direct, direct->g.output(direct->g.output_node())) == host(*apart, apart->g.output(apart->g.output_node())));
    CHECK(host(*direct, direct->g.params().grads()) == host(*apart, apart->g.params().grads()));
    CHECK(host(*direct, direct->g.input_grad(0)) == host(*apart, apart->g.input_grad(0)));
  }
}

// An add passes its gradient through to the residual stream in the stream's gradient buffer
// (Executor::set_grad_pass, ExecutionPlan::grad_over): the same bits as its copy, in fp32 and in
// every low precision, and the buffers are one (res1's gradient is res2's, pos's is res1's).
TEST_CASE("mixed precision: an add's gradient passed through in its input's buffer gives the bits of the copy, fp32 and low precisions", "[backends]") {
  std::vector<std::pair<Device, Precision>> cases = {{Device::cpu(), Precision::FP32}};
  for (const test::MixedCase& mc : test::mixed_cases()) cases.push_back({mc.device(), mc.precision});
  for (const auto& [dev, prec] : cases) {
    INFO(dev.str() << " " << precision_name(prec));
    auto shared = run(dev, prec, {}, kBlock, true, true), copied = run(dev, prec, {}, kBlock, true, false);
    const int pos = shared->g.node_index("pos"), res1 = shared->g.node_index("res1"), res2 = shared->g.node_index("res2");
    CHECK(shared->g.grad(res1).data() == shared->g.grad(res2).data());
    CHECK(shared->g.grad(pos).data() == shared->g.grad(res1).data());
    CHECK(copied->g.grad(res1).data() != copied->g.grad(res2).data());
    CHECK(host(*shared, shared->g.output(shared->g.output_node())) == host(*copied, copied->g.output(copied->g.output_node())));
    CHECK(host(*shared, shared->g.params().grads()) == host(*copied, copied->g.params().grads()));
    CHECK(host(*shared, shared->g.input_grad(0)) == host(*copied, copied->g.input_grad(0)));
  }
}
