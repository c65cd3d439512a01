// The pad_fold fast path: a zero_pad2d read only by a 'valid' depthwise convolution becomes an
// identity run in place (no padded copy, forward or backward) and the convolution adds the zeros
// itself — the same outputs, losses and gradients as the padded copy, at 1 to 4 threads; where
// the rule does not hold (another reader, 'same' windows, a plain convolution, the model's
// output) nothing is folded.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "test_devices.h"

using namespace trainer;

namespace {

// Two pads read by stride-2 and stride-1 depthwise windows (one of them 5x5, one dilated), each
// padding differently; their producers a fused batch norm + ReLU6 and a plain convolution.
const char* kFolded = R"(
model:
  input: [9, 10, 3]
  layers:
    - {name: c1, type: conv2d, filters: 6, kernel: 3, padding: same}
    - {name: bn, type: batchnorm}
    - {name: r6, type: relu6}
    - {name: pad1, type: zero_pad2d, padding: [[0, 1], [0, 1]]}
    - {name: dw1, type: depthwise_conv2d, kernel: 3, strides: 2, depth_multiplier: 2}
    - {name: c2, type: conv2d, filters: 5, kernel: 1}
    - {name: pad2, type: zero_pad2d, padding: [[2, 1], [0, 3]]}
    - {name: dw2, type: depthwise_conv2d, kernel: [5, 3], dilation: [1, 2], use_bias: false}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 4}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 8, shape: [9, 10, 3], classes: 4}
optimizer: {type: sgd, lr: 0.1}
)";

struct Result {
  std::vector<float> out, grads;
  double loss = 0;
  std::vector<int> in_place;  // per node: ExecutionPlan::in_place_of
  std::vector<std::string> folded;  // the folded pads: "pad1 -> dw1"
};

Result run(const std::string& yaml, bool fold, int threads, Device device = Device::cpu(0)) {
  const RunSpec e = read_run_spec(cfg::parse_document(yaml, "pad_fold.yaml", {}));
  TraineeSpec t = trainee_spec(e);
  t.context.fast = FastPaths::defaults().with(FastPath::PadFold, fold);
  t.graph = t.make_graph();
  Replica rep(t, device, device.is_cpu() ? threads : 0);
  rep.context().bind_thread();
  const Shape in = e.model.inputs.at(0).shape;
  Tensor x = Tensor::empty(in.with_batch(5)), y = Tensor::empty(Shape{5}, DType::I32);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
  for (int64_t i = 0; i < 5; ++i) y.i32()[i] = int32_t(rng() % 4u);
  Result r;
  Executor& ex = rep.executor();
  auto host = [&](const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    rep.context().copy_to_host(v.data(), t.data(), t.bytes());
    return v;
  };
  // The logits as forward leaves them (backward may reuse their bytes for gradients).
  GraphHooks h;
  h.after_forward = [&](int node) {
    if (node == rep.logits_node()) r.out = host(ex.output(node));
  };
  ex.set_hooks(std::move(h));
  r.loss = rep.compute_gradients(x, y, 0.2f, 1).loss_sum;
  REQUIRE(!r.out.empty());
  r.grads = host(ex.params().trainable_grads());
  r.in_place = ex.plan().in_place_of;
  for (const GraphNode& n : ex.nodes())
    if (n.layer->identity()) r.folded.push_back(n.layer->name() + " -> " + n.layer->describe().text("folded_into"));
  return r;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / std::max(n, 1e-30));
}

}  // namespace

TEST_CASE("pad_fold: a zero_pad2d read only by a 'valid' depthwise convolution is folded, with the padded copy's results",
          "[backends]") {
  for (const test::TestDevice& d : test::test_devices())
  for (int threads : {1, 2, 3, 4}) {
    if (!d.device.is_cpu() && threads > 1) continue;
    INFO(d.name << ", " << threads << " thread(s)");
    const Result folded = run(kFolded, true, threads, d.device), padded = run(kFolded, false, threads, d.device);
    CHECK(folded.folded == std::vector<std::string>{"pad1 -> dw1", "pad2 -> dw2"});
    CHECK(padded.folded.empty());
    // The folded pads run in place over their producers (relu6, fused into batch norm; c2).
    CHECK(folded.in_place[3] == 2);
    CHECK(folded.in_place[6] == 5);
    CHECK(padded.in_place[3] == -1);
    // Zeros added by the windows or read from a copy: the same sums (measured bit-identical
    // with oneDNN 2.6 here); the bound leaves room for another kernel's order.
    CHECK(rel(folded.out, padded.out) <= 1e-6);
    CHECK(rel(folded.grads, padded.grads) <= 1e-6);
    CHECK(std::abs(folded.loss - padded.loss) <= 1e-6 * std::abs(padded.loss));
    WARN(d.name << ", " << threads << " thread(s): outputs " << rel(folded.out, padded.out) << ", gradients "
                 << rel(folded.grads, padded.grads) << " relative");
  }
}

TEST_CASE("pad_fold: no fold where a pad has another reader, 'same' windows, a plain convolution or is the output") {
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kFolded;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  // pad1 read by dw1 and by an add (through a second depthwise of its shape).
  const std::string two_readers = with("    - {name: c2, type: conv2d, filters: 5, kernel: 1}\n",
                                       "    - {name: dw1b, type: depthwise_conv2d, kernel: 3, strides: 2, depth_multiplier: 2, inputs: [pad1]}\n"
                                       "    - {name: both, type: add, inputs: [dw1, dw1b]}\n"
                                       "    - {name: c2, type: conv2d, filters: 5, kernel: 1}\n");
  CHECK(run(two_readers, true, 1).folded == std::vector<std::string>{"pad2 -> dw2"});
  const std::string same = with("kernel: [5, 3], dilation: [1, 2]", "kernel: [5, 3], dilation: [1, 2], padding: same");
  CHECK(run(same, true, 1).folded == std::vector<std::string>{"pad1 -> dw1"});
  const std::string plain = with("{name: dw2, type: depthwise_conv2d, kernel: [5, 3], dilation: [1, 2], use_bias: false}",
                                 "{name: dw2, type: conv2d, filters: 5, kernel: [5, 3], dilation: [1, 2], use_bias: false}");
  CHECK(run(plain, true, 1).folded == std::vector<std::string>{"pad1 -> dw1"});
}
