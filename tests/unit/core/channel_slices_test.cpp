// Concat inputs written in place (ExecutionPlan::slice_of), their batch norms' forward and backward in one pass (sibling_leader): a training step and an inference pass give the same bits as copying every concat, in f32 and bf16.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "core/graph/executor.h"
#include "graph_test_util.h"
#include "skip.h"
#include "test_devices.h"
#include "test_models.h"

using namespace trainer;

namespace {

// Two inception modules and a downsample module (MiniGoogLeNet's): batch norm + ReLU branches
// joined by concat, the second module reading the first's output twice (its gradient is a sum),
// a max-pooling branch that is copied. Odd channel counts put the slices at unaligned offsets.
const std::string kNet = std::string("model:\n  input: [6, 6, 3]\n") + test::kMiniGoogLeNetBlocks + R"(  layers:
    - {name: conv1, type: conv_module, filters: 5, kernel: 3}
    - {name: incep1, type: inception, k1x1: 3, k3x3: 7}
    - {name: incep2, type: inception, k1x1: 9, k3x3: 4}
    - {name: down, type: downsample, filters: 6}
    - {name: pool, type: avg_pool2d, pool: 2}
    - {name: flatten, type: flatten}
    - {name: dense, type: dense, units: 4}
    - {name: softmax, type: softmax}
)";

struct Result {
  int slices = 0;    // nodes planned as channel slices
  int siblings = 0;  // batch norms in sibling groups
  bool skipped = true;  // the groups' members other than the leader ran no forward or backward of their own
  std::vector<float> out, grads, weights, input_grad, eval_out;
};

// One training forward and backward (seed 5, a fixed batch of 5 and output gradient), then an
// inference pass, on the CPU with 2 threads.
Result step(Precision p, bool slices) {
  auto ctx = make_context(Device::cpu(), ContextOptions{2, p});
  Executor g(std::make_shared<const Graph>(test::build(kNet)), *ctx, 5);
  g.set_channel_slices(slices);
  g.set_input_grad(0, true);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> xs(5 * 6 * 6 * 3), dys(5 * 4);
  for (float& v : xs) v = nd(rng);
  for (float& v : dys) v = nd(rng);
  Tensor x = ctx->empty(Shape{5, 6, 6, 3}), dy = ctx->empty(Shape{5, 4});
  ctx->copy_from_host(x.data(), xs.data(), x.bytes());
  ctx->copy_from_host(dy.data(), dys.data(), dy.bytes());
  g.set_profiling(true);
  g.forward(x, true);
  g.backward(dy, g.output_node());
  Result r;
  for (int s : g.plan().slice_of) r.slices += s >= 0;
  for (size_t i = 0; i < g.plan().sibling_leader.size(); ++i) {
    const int l = g.plan().sibling_leader[i];
    r.siblings += l >= 0;
    if (l >= 0 && l != int(i))
      r.skipped = r.skipped && g.layer_times()[i].forward == 0.0 && g.layer_times()[i].backward == 0.0;
  }
  r.out = test::host_floats(*ctx, g.output(g.output_node()));
  r.grads = test::host_floats(*ctx, g.params().grads());
  r.weights = test::host_floats(*ctx, g.params().weights());  // with the running statistics
  r.input_grad = test::host_floats(*ctx, g.input_grad(0));
  g.forward(x, false);
  r.eval_out = test::host_floats(*ctx, g.output(g.output_node()));
  return r;
}

// A training step and an inference pass in precision p: the same bits with the concat inputs
// written in place as with every concat copied.
void check_slices_equal_copies(Precision p) {
  INFO(precision_name(p));
  const Result copied = step(p, false), sliced = step(p, true);
  CHECK(copied.slices == 0);
  // Each module's batch norm + ReLU branches (a ReLU and its batch norm each); the downsample's
  // max pooling is copied.
  CHECK(sliced.slices == 2 * (2 * 2 + 1));
  // The two inception modules' batch norms, each pair's forward and backward in one pass (the second's).
  CHECK(copied.siblings == 0);
  CHECK(sliced.siblings == 2 * 2);
  CHECK(sliced.skipped);
  CHECK(sliced.out == copied.out);
  CHECK(sliced.grads == copied.grads);
  CHECK(sliced.weights == copied.weights);
  CHECK(sliced.input_grad == copied.input_grad);
  CHECK(sliced.eval_out == copied.eval_out);
}

}  // namespace

TEST_CASE("channel slices: a step with concat inputs written in place equals one that copies them, bit for bit") {
  check_slices_equal_copies(Precision::FP32);
}

TEST_CASE("channel slices in bf16: a step with concat inputs written in place equals one that copies them, bit for bit") {
  if (!test::cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, test::cpu_bf16_skip_message());
  check_slices_equal_copies(Precision::BF16);
}

TEST_CASE("channel slices: a strided view keeps its row stride through reshape and slice, and refuses the rest") {
  std::vector<float> buf(2 * 3 * 10);
  const Tensor t = Tensor::strided_view(buf.data() + 4, Shape{2, 3, 6}, DType::F32, Device::cpu(), 10);
  CHECK_FALSE(t.contiguous());
  CHECK(t.row_stride() == 10);
  CHECK(t.numel() == 36);
  // Merging leading axes keeps the rows: [6, 6], still 10 apart.
  const Tensor r = t.reshape(Shape{6, 6});
  CHECK(r.row_stride() == 10);
  CHECK(r.data() == t.data());
  CHECK_THROWS_AS(t.reshape(Shape{36}), std::logic_error);
  CHECK_THROWS_AS(t.reshape(Shape{2, 18}), std::logic_error);
  // A slice of the batch starts a whole number of strided rows later.
  const Tensor s = t.slice(1, 2);
  CHECK(s.data() == static_cast<void*>(buf.data() + 4 + 3 * 10));
  CHECK(s.row_stride() == 10);
  // Rows as far apart as the last axis: an ordinary contiguous view.
  CHECK(Tensor::strided_view(buf.data(), Shape{3, 10}, DType::F32, Device::cpu(), 10).contiguous());
  CHECK_THROWS_AS(Tensor::strided_view(buf.data(), Shape{3, 10}, DType::F32, Device::cpu(), 9), std::logic_error);
  CHECK(Tensor::view(buf.data(), Shape{3, 10}, DType::F32, Device::cpu()).row_stride() == 10);
}
