// A NaN or an inf in the activations reaches the loss, as in PyTorch and Keras: no layer turns it
// into a finite value (a clamp's select, a max's comparison), so terminate_on_nan and the loss
// itself say when training has diverged instead of a stalled model reporting a finite loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "test_devices.h"

using namespace trainer;

namespace {

RunSpec spec(const std::string& layers) {
  const std::string doc = "name: nan\nmodel:\n  input: [8, 8, 3]\n  layers:\n" + layers +
                          "data:\n  train: {type: synthetic, size: 64, shape: [8, 8, 3], classes: 5}\n"
                          "optimizer: {type: sgd, lr: 0.01}\n";
  return read_run_spec(cfg::parse_document(doc, "nan.yaml"));
}

struct HostBatch {
  Tensor images, labels;
};
HostBatch batch(int64_t n, float bad) {
  HostBatch b{Tensor::empty(Shape{n, 8, 8, 3}), Tensor::empty(Shape{n}, DType::I32)};
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.f32()[i] = nd(rng);
  for (int64_t i = 0; i < n; ++i) b.labels.i32()[i] = int32_t(rng() % 5u);
  b.images.f32()[3 * 8 * 3 + 3 * 3 + 1] = bad;  // sample 0, pixel (3, 3), channel 1
  return b;
}

// The models: every layer that clamps or takes a maximum, alone after a convolution and fused.
const char* kConv = "    - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: same}\n";
const char* kHead = "    - {name: flat, type: flatten}\n    - {name: dense, type: dense, units: 5}\n    - {name: out, type: softmax}\n";
struct Model {
  const char* name;
  std::string layers;
};
std::vector<Model> models() {
  return {
      {"relu", std::string(kConv) + "    - {name: a, type: relu}\n" + kHead},
      {"relu6", std::string(kConv) + "    - {name: a, type: relu6}\n" + kHead},
      {"batchnorm + relu (fused)", std::string(kConv) + "    - {name: bn, type: batchnorm}\n    - {name: a, type: relu}\n" + kHead},
      {"batchnorm + relu6 (fused)", std::string(kConv) + "    - {name: bn, type: batchnorm}\n    - {name: a, type: relu6}\n" + kHead},
      {"max pool", std::string(kConv) + "    - {name: p, type: max_pool2d, pool: 2}\n" + kHead},
      {"max pool 3x3 stride 1 same", std::string(kConv) + "    - {name: p, type: max_pool2d, pool: 3, strides: 1, padding: same}\n" + kHead},
      {"relu + max pool", std::string(kConv) + "    - {name: a, type: relu}\n    - {name: p, type: max_pool2d, pool: 2}\n" + kHead},
  };
}

}  // namespace

TEST_CASE("a NaN or an inf in the input reaches the loss through clamps and maxima, in training and evaluation",
          "[backends]") {
  for (const test::TestDevice& d : test::test_devices())
    for (const Model& m : models())
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        SECTION(d.name + " " + m.name + (std::isnan(bad) ? " NaN" : " inf")) {
          const RunSpec e = spec(m.layers);
          Replica rep(trainee_spec(e), d.device, d.device.is_cpu() ? 2 : 0);
          rep.context().bind_thread();
          const HostBatch b = batch(4, bad);
          // ReLU6 saturates an inf (to 6 or 0, as PyTorch's hardtanh): only a NaN must pass it
          // (and batch norm's training statistics of an inf, inf - inf).
          const bool saturates = !std::isnan(bad) && m.layers.find("relu6") != std::string::npos;
          const bool batch_stats = m.layers.find("batchnorm") != std::string::npos;
          // Evaluation: sample 0 carries it (an inf times a weight of either sign, or inf - inf).
          const LossStats ev = rep.eval_step(b.images, b.labels);
          CHECK(std::isfinite(ev.loss_sum) == saturates);
          // Training: the loss says so, and a model whose weights became NaN keeps saying so (a
          // saturated inf too: the kernel's gradient takes inf x 0, as in PyTorch).
          const LossStats tr = rep.train_step(b.images, b.labels, 0.01f, 1);
          CHECK(std::isfinite(tr.loss_sum) == (saturates && !batch_stats));
          const HostBatch clean = batch(4, 0.5f);
          const LossStats after = rep.train_step(clean.images, clean.labels, 0.01f, 2);
          CHECK_FALSE(std::isfinite(after.loss_sum));
        }
      }
}
