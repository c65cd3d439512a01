// Training steps with every CPU fast path against steps with none: MiniGoogLeNet's and MobileNetV2's blocks, teacher-forced, 1, 2 and 3 threads.
//
// Two replicas of one model: `fast` (every fast path: FastPaths::all) and `reference` (none). Each
// step both start from the reference's weights and compute the gradient of the same batch; the
// gradients are compared per tensor, then the reference takes its optimizer step. Comparing per
// step rather than after N independent steps matters: a ReLU6 input within one float ulp of 6
// flips its gate under any change of rounding and moves the next weights by lr·|x·dy| (the repro
// ../shared/repro/conv-wgrad-f32: 7.3e-5 after one such step, the float64 model agreeing with either
// side of the flip), so trajectories are compared by the gates they take: a step whose ReLU
// gates differ between the two sides is counted and reported, not compared.
//
// The bound, 1e-4 relative (Euclidean, per tensor): the paths round differently op by op (each op
// within its bound of float64: tests/unit/ops/fastpath_*_test.cpp), and these differences pass
// through about 30 layers of forward and backward, batch norm's backward amplifying them; measured
// here (AVX2, 2026-11-28) at most 1.1e-5 for MiniGoogLeNet's modules and 3.4e-6 for MobileNetV2's
// blocks (printed on every run). A lost image of the batch of 8 is 1/8, a wrong channel or tap of
// the same order: far above it.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <sstream>

#include "core/io/config.h"
#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "test_models.h"

using namespace trainer;

namespace {

// MiniGoogLeNet's modules (conv_module, inception, downsample) at a small size; odd channel counts.
const std::string kMiniGoogLeNet = std::string("model:\n  input: [12, 12, 3]\n") + test::kMiniGoogLeNetBlocks + R"(  layers:
    - {name: conv1, type: conv_module, filters: 24, kernel: 3}
    - {name: incep1, type: inception, k1x1: 8, k3x3: 17}
    - {name: incep2, type: inception, k1x1: 19, k3x3: 13}
    - {name: down, type: downsample, filters: 20}
    - {name: incep3, type: inception, k1x1: 16, k3x3: 33}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 16, image_size: 12, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
)";

// MobileNetV2's blocks (the repro's model): stem, an inverted residual, a downsampling one.
const char* kMobileNetV2 = R"(
model:
  input: [16, 16, 3]
  blocks:
    conv_bn_relu6:
      params: {filters: null, kernel: 1, stride: 1}
      layers:
        - {name: conv, type: conv2d, filters: $filters, kernel: $kernel, strides: $stride, padding: same, use_bias: false}
        - {name: bn, type: batchnorm, momentum: 0.999}
        - {name: relu6, type: relu6}
    dw_bn_relu6:
      params: {stride: 1, padding: same}
      layers:
        - {name: depthwise, type: depthwise_conv2d, kernel: 3, strides: $stride, padding: $padding, use_bias: false}
        - {name: bn, type: batchnorm, momentum: 0.999}
        - {name: relu6, type: relu6}
    project:
      params: [filters]
      layers:
        - {name: conv, type: conv2d, filters: $filters, kernel: 1, padding: same, use_bias: false}
        - {name: bn, type: batchnorm, momentum: 0.999}
    inverted_residual:
      params: [expand, filters]
      layers:
        - {name: expand, type: conv_bn_relu6, filters: $expand}
        - {name: depthwise, type: dw_bn_relu6}
        - {name: project, type: project, filters: $filters}
        - {name: add, type: add, inputs: [$input, project]}
    inverted_downsample:
      params: [expand, filters]
      layers:
        - {name: expand, type: conv_bn_relu6, filters: $expand}
        - {name: pad, type: zero_pad2d, padding: [[0, 1], [0, 1]]}
        - {name: depthwise, type: dw_bn_relu6, stride: 2, padding: valid}
        - {name: project, type: project, filters: $filters}
  layers:
    - {name: stem, type: conv_bn_relu6, filters: 16, kernel: 3, stride: 2}
    - {name: block1, type: inverted_residual, expand: 48, filters: 16}
    - {name: block2, type: inverted_downsample, expand: 48, filters: 24}
    - {name: block3, type: inverted_residual, expand: 72, filters: 24}
    - {name: head, type: conv_bn_relu6, filters: 40}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 16, image_size: 16, classes: 5}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
)";

constexpr double kBound = 1e-4;

// The gates of every ReLU and ReLU6 output, read when forward has reached the model's output (a
// sibling group's members are written by its last member, so not at their own node's end); those
// outputs live until their backward reads them.
struct Gates {
  std::vector<std::vector<bool>> masks;
};

void watch_gates(Replica& r, Gates& g) {
  Executor& e = r.executor();
  GraphHooks h;
  h.after_forward = [&e, &g](int node) {
    if (node != e.output_node()) return;
    for (size_t i = 0; i < e.nodes().size(); ++i) {
      const std::string type = e.nodes()[i].layer->type();
      if (type != "relu" && type != "relu6") continue;
      const Tensor& y = e.output(int(i));  // a strided view where it is a concat's channel slice
      const int64_t C = y.shape().back(), rows = C ? y.numel() / C : 0;
      std::vector<bool> m;
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t c = 0; c < C; ++c) {
          const float v = y.f32()[row * y.row_stride() + c];
          m.push_back(v > 0 && (type == "relu" || v < 6));
        }
      g.masks.push_back(std::move(m));
    }
  };
  e.set_hooks(h);
}

std::vector<float> gradients(Replica& r) {
  const Tensor g = r.executor().params().trainable_grads();
  return std::vector<float>(g.f32(), g.f32() + g.numel());
}

struct Outcome {
  double worst = 0;  // largest relative difference of a tensor's gradient over the compared steps
  std::string where;
  int compared = 0, flipped = 0;
};

Outcome compare(const std::string& yaml, int threads, int steps) {
  const RunSpec e = read_run_spec(cfg::parse_document(yaml, "fast_paths.yaml", {}));
  TraineeSpec fast = trainee_spec(e), slow = trainee_spec(e);
  fast.context.fast = FastPaths::all();
  slow.context.fast = FastPaths::none();
  fast.graph = fast.make_graph();  // pad_fold: the graph itself differs (zero_pad2d folded or not)
  slow.graph = slow.make_graph();
  Replica f(fast, Device::cpu(0), threads), s(slow, Device::cpu(0), threads);
  REQUIRE(f.executor().params().total_floats() == s.executor().params().total_floats());
  Gates gf, gs;
  watch_gates(f, gf);
  watch_gates(s, gs);
  const Shape in = e.model.inputs.at(0).shape;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2, 2);
  Outcome o;
  for (int step = 0; step < steps; ++step) {
    const int64_t n = 8;
    Tensor images = Tensor::empty(in.with_batch(n)), labels = Tensor::empty(Shape{n}, DType::I32);
    for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = u(rng);
    for (int64_t i = 0; i < n; ++i) labels.i32()[i] = int32_t(rng() % 5u);
    f.executor().params().upload(f.context(), s.executor().params().download(s.context()));
    gf.masks.clear(), gs.masks.clear();
    f.compute_gradients(images, labels, 1.0f / float(n), uint64_t(step));
    s.compute_gradients(images, labels, 1.0f / float(n), uint64_t(step));
    if (gf.masks != gs.masks) {
      ++o.flipped;
    } else {
      ++o.compared;
      const std::vector<float> a = gradients(f), b = gradients(s);
      std::vector<std::pair<double, double>> dm;  // per trainable tensor: |a - b|², |b|²
      double largest = 0;
      for (const ParamEntry& p : s.executor().params().entries()) {
        if (!p.spec.trainable) continue;
        double d = 0, m = 0;
        for (int64_t i = p.offset; i < p.offset + p.spec.shape.numel(); ++i) {
          d += (double(a[size_t(i)]) - b[size_t(i)]) * (double(a[size_t(i)]) - b[size_t(i)]);
          m += double(b[size_t(i)]) * b[size_t(i)];
        }
        dm.push_back({d, m});
        largest = std::max(largest, std::sqrt(m));
      }
      size_t k = 0;
      for (const ParamEntry& p : s.executor().params().entries()) {
        if (!p.spec.trainable) continue;
        const auto [d, m] = dm[k++];
        // Relative to the tensor's norm, but not below 1e-2 of the model's largest: a gradient that
        // is 0 in exact arithmetic (the beta of a batch norm whose output another batch norm
        // normalises: a shift it cannot see; MobileNetV2's project batch norms, |g| ~ 3e-8 against
        // 0.1) is rounding noise of the terms it sums, on both sides.
        const double rel = std::sqrt(d) / std::max(std::sqrt(m), 1e-2 * largest);
        INFO("step " << step << ", " << p.name << ": relative difference " << rel << " (|g| " << std::sqrt(m)
                     << ", the largest tensor's " << largest << ")");
        CHECK(rel <= kBound);
        if (rel > o.worst) o.worst = rel, o.where = p.name + " at step " + std::to_string(step);
      }
    }
    s.train_step(images, labels, 0.05f, uint64_t(step));
  }
  return o;
}

void run_model(const char* name, const std::string& yaml) {
  for (int threads : {1, 2, 3}) {
    const Outcome o = compare(yaml, threads, 10);
    WARN(name << ", " << threads << " thread(s), every fast path vs none, 10 teacher-forced steps: largest relative "
              << "gradient difference per tensor " << o.worst << " (" << o.where << "; bound " << kBound << ") over " << o.compared
              << " steps; " << o.flipped << " step(s) with a ReLU gate flipped by rounding, not compared");
    CHECK(o.compared >= 8);  // a flip is rare (an activation within an ulp of a bound): most steps compare
  }
}

}  // namespace

TEST_CASE("fast paths in training: MiniGoogLeNet's modules, every CPU fast path vs none, 10 steps at 1, 2 and 3 threads") {
  run_model("MiniGoogLeNet modules", kMiniGoogLeNet);
}

TEST_CASE("fast paths in training: MobileNetV2's blocks, every CPU fast path vs none, 10 steps at 1, 2 and 3 threads") {
  run_model("MobileNetV2 blocks", kMobileNetV2);
}
