// The op headers' argument checks: one representative bad argument per op family throws std::invalid_argument with the same message on every backend.
#include <functional>
#include <stdexcept>
#include <string>

#include "backends.h"
#include "core/ops/activation.h"
#include "core/ops/batchnorm.h"
#include "core/ops/conv2d.h"
#include "core/ops/dense.h"
#include "core/ops/depthwise_conv2d.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/lstm.h"
#include "core/ops/optim_update.h"
#include "core/ops/pad2d.h"
#include "core/ops/pooling.h"
#include "core/ops/sigmoid_xent.h"
#include "core/ops/softmax.h"

namespace trainer::test {
namespace {

// The message of the std::invalid_argument that f throws ("" when it throws nothing; any other
// exception escapes and fails the test).
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// One family's case: `call` runs on a backend; `want` is the message every backend must give.
struct Case {
  const char* family;
  std::string want;
  std::function<void(const Backend&)> call;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"conv2d", "conv2d: w has shape [3x3x2x8], expected [3x3x4x8]", [](const Backend& be) {
                 auto k = make_kernel<Conv2dKernel>(be.ctx(), Conv2dParams{8, 3, 3, 1, 1, 1, 1, Padding::Same, true});
                 Tensor x = be.empty({2, 5, 5, 4}), w = be.empty({3, 3, 2, 8}), b = be.empty({8});
                 Tensor y = be.empty({2, 5, 5, 8});
                 k->forward(x, w, b, y);
               }});
  c.push_back({"depthwise_conv2d", "depthwise_conv2d: y must be f32, got bf16", [](const Backend& be) {
                 DepthwiseConv2dParams p;
                 p.kh = p.kw = 3;
                 auto k = make_kernel<DepthwiseConv2dKernel>(be.ctx(), p);
                 Tensor x = be.empty({1, 5, 5, 4}), w = be.empty({3, 3, 4, 1}), b = be.empty({4});
                 Tensor y = be.empty({1, 3, 3, 4}, DType::BF16);
                 k->forward(x, w, b, y);
               }});
  c.push_back({"dense", "dense: x must have rank >= 2, got [4]", [](const Backend& be) {
                 auto k = make_kernel<DenseKernel>(be.ctx(), DenseParams{3, true});
                 Tensor x = be.empty({4}), w = be.empty({4, 3}), b = be.empty({3}), y = be.empty({3});
                 k->forward(x, w, b, y);
               }});
  c.push_back({"batchnorm", "batchnorm: count has shape [4], expected [1]", [](const Backend& be) {
                 auto k = make_kernel<BatchNormKernel>(be.ctx(), BatchNormParams{});
                 Tensor x = be.empty({6, 4}), v = be.empty({4}), dx = be.empty({6, 4});
                 k->backward_apply(x, x, v, v, v, v, v, v, dx);
               }});
  c.push_back({"batchnorm (parameters)", "batchnorm: cannot fuse activation sigmoid", [](const Backend& be) {
                 BatchNormParams p;
                 p.activation = ActKind::Sigmoid;
                 make_kernel<BatchNormKernel>(be.ctx(), p);
               }});
  c.push_back({"pool2d", "pool2d: pool size 0x2 and strides 2x2 must be positive", [](const Backend& be) {
                 make_kernel<Pool2dKernel>(be.ctx(), Pool2dParams{PoolKind::Max, 0, 2, 2, 2, Padding::Valid});
               }});
  c.push_back({"global_pool", "global_pool: x must have rank 4, got [2x3x4]", [](const Backend& be) {
                 auto k = make_kernel<GlobalPoolKernel>(be.ctx(), GlobalPoolParams{});
                 Tensor x = be.empty({2, 3, 4}), y = be.empty({2, 4});
                 k->forward(x, y);
               }});
  c.push_back({"activation", "activation: x must be f32, bf16 or f16, got i32", [](const Backend& be) {
                 auto k = make_kernel<ActivationKernel>(be.ctx(), ActivationParams{ActKind::Relu});
                 Tensor x = be.empty({2, 3}, DType::I32), y = be.empty({2, 3});
                 k->forward(x, y);
               }});
  c.push_back({"elementwise", "add: input 2 aliases the output", [](const Backend& be) {
                 auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
                 Tensor a = be.empty({2, 3}), b = be.empty({2, 3}), y = be.empty({2, 3});
                 k->add({&a, &b, &y}, y);
               }});
  c.push_back({"dropout", "dropout: mask must be u8, got f32", [](const Backend& be) {
                 auto k = make_kernel<DropoutKernel>(be.ctx(), DropoutParams{0.5f});
                 Tensor x = be.empty({2, 3}), y = be.empty({2, 3}), mask = be.empty({2, 3});
                 k->forward(x, y, mask, 1);
               }});
  c.push_back({"softmax", "cross_entropy: dlogits has shape [4x2], expected [4x3]", [](const Backend& be) {
                 auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
                 Tensor logits = be.empty({4, 3}), labels = be.empty({4}, DType::I32), dl = be.empty({4, 2});
                 k->cross_entropy(logits, labels, dl, 1.0f);
               }});
  c.push_back({"sigmoid_xent", "sigmoid_xent: logits must be [N, 1] or [N], got [4x2]", [](const Backend& be) {
                 auto k = make_kernel<SigmoidXentKernel>(be.ctx(), SigmoidXentParams{});
                 Tensor logits = be.empty({4, 2}), labels = be.empty({4}, DType::I32), none;
                 k->loss(logits, labels, none, 1.0f);
               }});
  c.push_back({"embedding", "embedding: w is undefined", [](const Backend& be) {
                 auto k = make_kernel<EmbeddingKernel>(be.ctx(), EmbeddingParams{10, 4});
                 Tensor ids = be.empty({2, 3}), w, y = be.empty({2, 3, 4});
                 k->forward(ids, w, y);
               }});
  c.push_back({"lstm", "lstm: r has shape [3x8], expected [2x8]", [](const Backend& be) {
                 auto k = make_kernel<LstmKernel>(be.ctx(), LstmParams{2, false, true});
                 Tensor x = be.empty({1, 3, 5}), w = be.empty({5, 8}), r = be.empty({3, 8}), b = be.empty({8});
                 Tensor y = be.empty({1, 2});
                 k->forward(x, w, r, b, y, true);
               }});
  c.push_back({"pad2d", "pad2d: padding -1/0 x 0/0 must not be negative", [](const Backend& be) {
                 make_kernel<Pad2dKernel>(be.ctx(), Pad2dParams{-1, 0, 0, 0});
               }});
  c.push_back({"optim_update", "adam: bias corrections must be positive (step >= 1)", [](const Backend& be) {
                 auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
                 Tensor w = be.empty({5}), g = be.empty({5}), m = be.empty({5}), v = be.empty({5});
                 k->adam(w, g, m, v, AdamStep{0.1f, 0.9f, 0.999f, 1e-7f, 0.0f, 1.0f, false, 0.0f, 1.0f});
               }});
  return c;
}

TEST_CASE("op argument checks: each family refuses a bad argument with one message on every backend", "[backends]") {
  for (const Case& k : cases()) {
    INFO(k.family);
    std::string first;
    for (const Backend& be : backends()) {
      INFO(be.name);
      const std::string got = refusal([&] { k.call(be); });
      CHECK(got == k.want);
      if (first.empty()) first = got;
      CHECK(got == first);  // the same words on every backend present
    }
  }
}

TEST_CASE("op argument checks: a tensor on another device is refused, naming it and the kernel's device", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    const Device other = be.is_cpu() ? Device::cuda(0) : Device::cpu();
    Tensor x = be.empty({2, 3});
    Tensor y = Tensor::view(x.data(), {2, 3}, DType::F32, other);  // never dereferenced: refused first
    const std::string where = be.is_cpu() ? "the CPU" : be.ctx().device().str();
    CHECK(refusal([&] { k->forward(x, y); }) == "softmax: y is on " + other.str() + ", not " + where);
  }
}

TEST_CASE("op argument checks: CPU tensors of any replica's device index are host memory") {
  auto k = make_kernel<ActivationKernel>(cpu_ctx(), ActivationParams{ActKind::Relu});
  Tensor x = Tensor::empty({2, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i) - 2.0f;
  Tensor y = Tensor::view(x.data(), {2, 3}, DType::F32, Device::cpu(3));  // in place, replica 3's view
  REQUIRE_NOTHROW(k->forward(x, y));
  CHECK(x.f32()[0] == 0.0f);
  CHECK(x.f32()[5] == 3.0f);
}

}  // namespace
}  // namespace trainer::test
