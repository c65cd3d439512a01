// Every op family's kernels, called again on the shapes of a previous call, allocate nothing: allocator_calls() stays put (CPU always, CUDA when a GPU is visible).
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends.h"
#include "bf16_check.h"
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
#include "core/tensor/allocator.h"

namespace trainer::test {
namespace {

// Runs a family's forward and backward once (the warm-up: plans, workspaces and scratch are made
// for these shapes), then again, and checks that the second run called no allocator. Every tensor
// the step uses is made before it.
void check_steady(const std::string& family, const std::function<void()>& step) {
  INFO(family);
  step();
  const uint64_t before = allocator_calls();
  step();
  CHECK(allocator_calls() - before == 0);
}

Tensor labels_i32(const Backend& be, const std::vector<int32_t>& v) {
  Tensor h = Tensor::empty({int64_t(v.size())}, DType::I32);
  for (size_t i = 0; i < v.size(); ++i) h.i32()[i] = v[i];
  return be.upload(h);
}

// Activations of type t on be's device (f32 values rounded to t on the host).
Tensor activations(const Backend& be, const Shape& s, std::mt19937_64& rng, DType t) {
  Tensor h = random_tensor(s, rng);
  if (t == DType::F32) return be.upload(h);
  ref::Vec v = to_vec(h);
  for (double& e : v) e = bf16_check::round_to(t, e);
  return be.upload(bf16_check::make(s, t, v));
}

void windows_and_convolutions(const Backend& be, DType t) {
  std::mt19937_64 rng(301);
  const std::string ty = std::string(" ") + dtype_name(t);
  {  // 'same' with an even kernel: the odd padding (the CUDA kernel's explicitly padded copy)
    auto k = make_kernel<Conv2dKernel>(be.ctx(), Conv2dParams{6, 2, 2, 1, 1, 1, 1, Padding::Same, true});
    Tensor x = activations(be, {2, 5, 5, 3}, rng, t), y = activations(be, {2, 5, 5, 6}, rng, t);
    Tensor w = be.upload(random_tensor({2, 2, 3, 6}, rng)), b = be.upload(random_tensor({6}, rng));
    Tensor dy = activations(be, {2, 5, 5, 6}, rng, t), dx = activations(be, x.shape(), rng, t);
    Tensor dw = be.empty(w.shape()), db = be.empty({6});
    check_steady("conv2d" + ty, [&] {
      k->forward(x, w, b, y);
      k->backward(x, w, dy, dx, dw, db);
    });
  }
  {
    DepthwiseConv2dParams p;
    p.multiplier = 2, p.kh = p.kw = 3, p.padding = Padding::Same;
    auto k = make_kernel<DepthwiseConv2dKernel>(be.ctx(), p);
    Tensor x = activations(be, {2, 6, 6, 4}, rng, t), y = activations(be, {2, 6, 6, 8}, rng, t);
    Tensor w = be.upload(random_tensor({3, 3, 4, 2}, rng)), b = be.upload(random_tensor({8}, rng));
    Tensor dy = activations(be, y.shape(), rng, t), dx = activations(be, x.shape(), rng, t);
    Tensor dw = be.empty(w.shape()), db = be.empty({8});
    check_steady("depthwise_conv2d" + ty, [&] {
      k->forward(x, w, b, y);
      k->backward(x, w, dy, dx, dw, db);
    });
  }
  {
    auto k = make_kernel<BatchNormKernel>(be.ctx(), BatchNormParams{0.9f, 1e-3f, ActKind::Relu});
    auto sync = make_kernel<BatchNormKernel>(be.ctx(), BatchNormParams{});
    Tensor x = activations(be, {4, 3, 3, 5}, rng, t), y = activations(be, x.shape(), rng, t);
    Tensor dy = activations(be, x.shape(), rng, t), dx = activations(be, x.shape(), rng, t);
    Tensor g = be.upload(random_tensor({5}, rng, 0.5, 1.5)), bt = be.upload(random_tensor({5}, rng));
    Tensor rm = be.zeros({5}), rv = be.upload(random_tensor({5}, rng, 0.5, 1.5));
    Tensor mean = be.empty({5}), is = be.empty({5}), dg = be.empty({5}), dbt = be.empty({5});
    Tensor s1 = be.empty({5}), s2 = be.empty({5}), var = be.empty({5}), n = be.empty({1});
    check_steady("batchnorm" + ty, [&] {
      k->forward_train(x, g, bt, y, mean, is, rm, rv);
      k->backward(x, y, g, dy, mean, is, dx, dg, dbt);
      k->forward_infer(x, g, bt, rm, rv, y);
      sync->channel_sums(x, mean, s1, s2);
      sync->sync_count(x, n);
      sync->sync_mean(s1, n, mean);
      sync->sync_stats(s1, s2, n, mean, is, var, rm, rv);
      sync->backward_sums(x, dy, mean, s1, s2);
      sync->sync_param_grads(s1, s2, is, dg, dbt);
      sync->backward_apply(x, dy, g, mean, is, s1, s2, n, dx);
    });
  }
  for (PoolKind kind : {PoolKind::Max, PoolKind::Avg}) {
    auto k = make_kernel<Pool2dKernel>(be.ctx(), Pool2dParams{kind, 3, 3, 2, 2, Padding::Same});
    Tensor x = activations(be, {2, 7, 7, 3}, rng, t), y = activations(be, {2, 4, 4, 3}, rng, t);
    Tensor dy = activations(be, y.shape(), rng, t), dx = activations(be, x.shape(), rng, t);
    check_steady(std::string("pool2d ") + (kind == PoolKind::Max ? "max" : "avg") + ty, [&] {
      k->forward(x, y, true);
      k->backward(x, y, dy, dx);
      k->forward(x, y, false);  // no training forward before this backward: the argmax is recomputed
      k->backward(x, y, dy, dx);
    });
    auto gk = make_kernel<GlobalPoolKernel>(be.ctx(), GlobalPoolParams{kind});
    Tensor gy = activations(be, {2, 3}, rng, t), gdy = activations(be, {2, 3}, rng, t);
    check_steady(std::string("global_pool ") + (kind == PoolKind::Max ? "max" : "avg") + ty, [&] {
      gk->forward(x, gy);
      gk->backward(x, gy, gdy, dx);
    });
  }
  {
    auto k = make_kernel<Pad2dKernel>(be.ctx(), Pad2dParams{1, 2, 0, 1});
    Tensor x = activations(be, {2, 3, 4, 3}, rng, t), y = activations(be, {2, 6, 5, 3}, rng, t);
    Tensor dx = activations(be, x.shape(), rng, t);
    check_steady("pad2d" + ty, [&] {
      k->forward(x, y);
      k->backward(y, dx);
    });
  }
  for (ActKind a : {ActKind::Relu, ActKind::Sigmoid, ActKind::Linear}) {
    auto k = make_kernel<ActivationKernel>(be.ctx(), ActivationParams{a});
    Tensor x = activations(be, {3, 7}, rng, t), y = activations(be, {3, 7}, rng, t);
    Tensor dy = activations(be, {3, 7}, rng, t), dx = activations(be, {3, 7}, rng, t);
    check_steady(std::string("activation ") + activation_name(a) + ty, [&] {
      k->forward(x, y);
      k->backward(x, y, dy, dx);
    });
  }
  {
    auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    Tensor a = activations(be, {3, 4}, rng, t), b = activations(be, {3, 4}, rng, t);
    Tensor c = activations(be, {3, 4}, rng, t), y = activations(be, {3, 4}, rng, t);
    Tensor wide = activations(be, {3, 8}, rng, t), f = be.empty({3, 4});
    check_steady("elementwise" + ty, [&] {
      k->add({&a, &b, &c}, y);
      k->accumulate(a, y);
      k->convert(a, f);
      k->convert(f, y);
      k->scale(f, 0.5f);
      k->concat({&a, &b}, wide);
      k->split(wide, {&c, &y});
    });
  }
}

void everything_else(const Backend& be) {
  std::mt19937_64 rng(302);
  {
    auto k = make_kernel<DenseKernel>(be.ctx(), DenseParams{5, true});
    Tensor x = be.upload(random_tensor({3, 2, 4}, rng)), w = be.upload(random_tensor({4, 5}, rng));
    Tensor b = be.upload(random_tensor({5}, rng)), y = be.empty({3, 2, 5}), dy = be.upload(random_tensor({3, 2, 5}, rng));
    Tensor dx = be.empty(x.shape()), dw = be.empty(w.shape()), db = be.empty({5});
    check_steady("dense", [&] {
      k->forward(x, w, b, y);
      k->backward(x, w, dy, dx, dw, db);
    });
  }
  {
    auto k = make_kernel<DropoutKernel>(be.ctx(), DropoutParams{0.3f});
    Tensor x = be.upload(random_tensor({5, 6}, rng)), y = be.empty({5, 6}), m = be.empty({5, 6}, DType::U8);
    Tensor dx = be.empty({5, 6});
    check_steady("dropout", [&] {
      k->forward(x, y, m, 7);
      k->backward(y, m, dx);
    });
  }
  {
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    Tensor x = be.upload(random_tensor({4, 6}, rng)), y = be.empty({4, 6}), dy = be.upload(random_tensor({4, 6}, rng));
    Tensor dx = be.empty({4, 6}), labels = labels_i32(be, {0, 5, 2, 2}), onehot = be.zeros({4, 6});
    Tensor dl = be.empty({4, 6}), none;
    check_steady("softmax", [&] {
      k->forward(x, y);
      k->backward(y, dy, dx);
      k->cross_entropy(x, labels, dl, 0.25f);
      k->cross_entropy(x, onehot, none, 0.25f);
    });
  }
  {
    auto k = make_kernel<SigmoidXentKernel>(be.ctx(), SigmoidXentParams{});
    Tensor x = be.upload(random_tensor({5, 1}, rng)), labels = labels_i32(be, {0, 1, 1, 0, 1});
    Tensor dl = be.empty({5, 1});
    check_steady("sigmoid_xent", [&] { k->loss(x, labels, dl, 0.2f); });
  }
  {
    auto k = make_kernel<EmbeddingKernel>(be.ctx(), EmbeddingParams{7, 3});
    Tensor ids = be.upload(from_vec({2, 3}, {1, 6, 1, 0, 3, 6})), w = be.upload(random_tensor({7, 3}, rng));
    Tensor y = be.empty({2, 3, 3}), dy = be.upload(random_tensor({2, 3, 3}, rng)), dw = be.empty({7, 3});
    check_steady("embedding", [&] {
      k->forward(ids, w, y);
      k->backward(ids, dy, dw);
    });
  }
  for (bool seq : {false, true}) {
    auto k = make_kernel<LstmKernel>(be.ctx(), LstmParams{3, seq, true});
    Tensor x = be.upload(random_tensor({2, 4, 5}, rng)), w = be.upload(random_tensor({5, 12}, rng));
    Tensor r = be.upload(random_tensor({3, 12}, rng)), b = be.upload(random_tensor({12}, rng));
    const Shape ys = seq ? Shape{2, 4, 3} : Shape{2, 3};
    Tensor y = be.empty(ys), dy = be.upload(random_tensor(ys, rng));
    Tensor dx = be.empty(x.shape()), dw = be.empty(w.shape()), dr = be.empty(r.shape()), db = be.empty({12});
    check_steady(seq ? "lstm (sequences)" : "lstm", [&] {
      k->forward(x, w, r, b, y, true);
      k->backward(x, w, r, y, dy, dx, dw, dr, db);
    });
  }
  {
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    Tensor w = be.upload(random_tensor({9}, rng)), g = be.upload(random_tensor({9}, rng));
    Tensor s1 = be.zeros({9}), s2 = be.zeros({9}), s3 = be.zeros({9});
    check_steady("optim_update", [&] {
      k->sgd(w, g, s1, SgdStep{0.1f, 0.9f, 0.0f, 1.0f, true});
      k->adam(w, g, s1, s2, AdamStep{0.01f, 0.9f, 0.999f, 1e-7f, 0.01f, 1.0f, true, 0.1f, 0.001f});
      k->rmsprop(w, g, s1, s2, s3, RmspropStep{0.01f, 0.9f, 0.5f, 1e-7f, 0.0f, 1.0f, true});
      CHECK(k->all_finite(g));
    });
  }
}

// Dense under a low-precision context rounds its f32 operands inside the kernel (scratch copies).
void low_precision_dense(const bf16_check::Low& lo) {
  std::mt19937_64 rng(303);
  OpContext& c = lo.lctx();  // its tensors come from its own allocator and stream
  auto k = make_kernel<DenseKernel>(c, DenseParams{5, true});
  Tensor x = to_device(c, random_tensor({6, 4}, rng)), w = to_device(c, random_tensor({4, 5}, rng));
  Tensor b = to_device(c, random_tensor({5}, rng)), dy = to_device(c, random_tensor({6, 5}, rng));
  Tensor y = c.empty({6, 5}), dx = c.empty({6, 4}), dw = c.empty({4, 5}), db = c.empty({5});
  check_steady("dense under " + lo.name(), [&] {
    k->forward(x, w, b, y);
    k->backward(x, w, dy, dx, dw, db);
  });
}

}  // namespace

// f32 on each backend (TRAINER_TEST_BACKEND: "<name>" on the CPU, "<name> (cuda)" on a GPU).
TEST_CASE("kernels allocate nothing when called again on the same shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
      windows_and_convolutions(be, DType::F32);
      everything_else(be);
    }
}

// Each low type of each backend (bf16_check.h's lows(): skipped where the CPU has no bf16).
TEST_CASE("kernels in low precision allocate nothing when called again on the same shapes", "[backends]") {
  for (const bf16_check::Low& lo : bf16_check::lows()) SECTION(lo.name()) {
      windows_and_convolutions(*lo.be, lo.type);
      low_precision_dense(lo);
    }
}

}  // namespace trainer::test
