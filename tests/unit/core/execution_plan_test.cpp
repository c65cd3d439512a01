// ExecutionPlan, a pure function: every buffer inside the arena and aligned, no two live buffers
// overlapping, in-place and fused nodes where the rules allow them, types per precision.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/graph/execution_plan.h"
#include "core/run/spec.h"
#include "graph_test_util.h"

using namespace trainer;

namespace {

const Graph& minigooglenet() {
  static const Graph g(load_run_spec(TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml", {}).model);
  return g;
}

ExecutionInputs inputs_for(const Graph& g, int64_t batch, DType low, bool fuse) {
  ExecutionInputs in;
  in.batch = batch;
  in.low = low;
  in.input_dtypes.assign(g.input_shapes().size(), DType::F32);
  in.keep_f32.assign(g.nodes().size(), false);
  in.keep_f32[size_t(g.output_node())] = true;
  in.input_grads.assign(g.input_shapes().size(), false);
  in.can_fuse = [fuse](int, ActKind k) { return fuse && (k == ActKind::Relu || k == ActKind::Relu6); };
  return in;
}

bool overlap(const Region& a, const Region& b) {
  return a.defined() && b.defined() && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// The backward lifetime of each node's output gradient, in steps from the start of backward:
// from its last consumer's backward (or 0 when nothing in the graph consumes it) to its own.
std::vector<std::pair<size_t, size_t>> lifetimes(const Graph& g) {
  const size_t n = g.nodes().size();
  std::vector<std::pair<size_t, size_t>> life(n);
  for (size_t j = 0; j < n; ++j) life[j] = {0, n - 1 - j};
  std::vector<bool> consumed(n, false);
  for (size_t i = 0; i < n; ++i)
    for (int j : g.nodes()[i].inputs)
      if (!is_model_input(j)) {
        life[size_t(j)].first = consumed[size_t(j)] ? std::min(life[size_t(j)].first, n - 1 - i) : n - 1 - i;
        consumed[size_t(j)] = true;
      }
  return life;
}

void check_plan(const Graph& g, const ExecutionPlan& p) {
  const size_t n = g.nodes().size();
  std::vector<Region> all;
  for (size_t i = 0; i < n; ++i) all.insert(all.end(), {p.act[i], p.cast[i], p.grad[i]});
  all.insert(all.end(), p.input_cast.begin(), p.input_cast.end());
  all.insert(all.end(), p.input_grad.begin(), p.input_grad.end());
  all.push_back(p.scratch);
  for (const Region& r : all) {
    if (!r.defined()) continue;
    CHECK(r.offset % 64 == 0);
    CHECK(r.offset + r.bytes <= p.arena_bytes);
  }
  for (size_t i = 0; i < n; ++i) {
    INFO("node " << i << " " << g.nodes()[i].layer->name());
    CHECK(p.act[i].bytes >= g.nodes()[i].shape.numel() * p.batch * int64_t(dtype_size(p.dtypes[i])));
    // An in-place node writes its producer's output region, of its own type.
    if (p.in_place_of[i] >= 0) {
      CHECK(p.act[i].offset == p.act[size_t(p.in_place_of[i])].offset);
      CHECK(p.dtypes[i] == p.dtypes[size_t(p.in_place_of[i])]);
    }
    // Activations, converted copies and gradients never overlap one another's kind.
    for (size_t j = 0; j < n; ++j) {
      const bool same_buffer = p.in_place_of[i] == int(j) || p.in_place_of[j] == int(i) ||
                               (p.in_place_of[i] >= 0 && p.in_place_of[i] == p.in_place_of[j]);
      if (i != j && !same_buffer) CHECK_FALSE(overlap(p.act[i], p.act[j]));
      CHECK_FALSE(overlap(p.act[i], p.grad[j]));
      CHECK_FALSE(overlap(p.cast[i], p.grad[j]));
      CHECK_FALSE(overlap(p.scratch, p.grad[j]));
    }
    if (p.fused_into[i] >= 0) {
      CHECK(p.in_place_of[i] == p.fused_into[i]);
      CHECK(p.applies[size_t(p.fused_into[i])] == g.nodes()[i].layer->activation());
    }
  }
  // Two gradients live at the same time in backward never share bytes (an in-place pair shares
  // one buffer on purpose: the consumer's backward writes its input's gradient over its own).
  const auto life = lifetimes(g);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      if (p.in_place_of[i] == int(j) || p.in_place_of[j] == int(i)) continue;
      const bool live_together = life[i].first <= life[j].second && life[j].first <= life[i].second;
      if (live_together) {
        INFO("gradients of " << g.nodes()[i].layer->name() << " and " << g.nodes()[j].layer->name());
        CHECK_FALSE(overlap(p.grad[i], p.grad[j]));
      }
    }
}

}  // namespace

TEST_CASE("execution plan: MiniGoogLeNet's buffers fit the arena, aligned, and live ones never overlap") {
  const Graph& g = minigooglenet();
  for (int64_t batch : {1, 2, 7}) {
    const ExecutionPlan p = plan_execution(g, inputs_for(g, batch, DType::F32, true));
    INFO("batch " << batch);
    check_plan(g, p);
    // Gradient sharing keeps far less than one buffer per node.
    int64_t outputs = 0;
    for (const GraphNode& node : g.nodes()) outputs += node.shape.numel() * batch * 4;
    CHECK(p.gradient_bytes < outputs / 4);
    CHECK(p.arena_bytes > 0);
  }
}

TEST_CASE("execution plan: a pure function of its inputs, scaling with the batch") {
  const Graph& g = minigooglenet();
  const ExecutionPlan a = plan_execution(g, inputs_for(g, 4, DType::F32, true));
  const ExecutionPlan b = plan_execution(g, inputs_for(g, 4, DType::F32, true));
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    CHECK(a.act[i].offset == b.act[i].offset);
    CHECK(a.grad[i].offset == b.grad[i].offset);
  }
  CHECK(a.arena_bytes == b.arena_bytes);
  const ExecutionPlan c = plan_execution(g, inputs_for(g, 8, DType::F32, true));
  CHECK(c.arena_bytes > a.arena_bytes);
  CHECK(c.arena_bytes <= 2 * a.arena_bytes + 64 * int64_t(3 * g.nodes().size() + 4));
}

TEST_CASE("execution plan: fusion follows the producer's ability, never into kept outputs") {
  const Graph& g = minigooglenet();
  const ExecutionPlan fused = plan_execution(g, inputs_for(g, 2, DType::F32, true));
  const ExecutionPlan plain = plan_execution(g, inputs_for(g, 2, DType::F32, false));
  int nf = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    nf += fused.fused_into[i] >= 0;
    CHECK(plain.fused_into[i] == -1);
    CHECK_FALSE(plain.applies[i].has_value());
  }
  CHECK(nf > 10);  // every conv module's batch norm takes its ReLU
  check_plan(g, plain);
  // A kept node (the engine reads it) applies no activation of its consumer.
  ExecutionInputs in = inputs_for(g, 2, DType::F32, true);
  int bn = -1;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (fused.fused_into[i] >= 0) bn = fused.fused_into[i];
  REQUIRE(bn >= 0);
  in.keep_f32[size_t(bn)] = true;
  const ExecutionPlan kept = plan_execution(g, in);
  CHECK_FALSE(kept.applies[size_t(bn)].has_value());
}

TEST_CASE("execution plan: bf16 types per layer, kept nodes f32, converted copies where types change") {
  const Graph& g = minigooglenet();
  ExecutionInputs in = inputs_for(g, 3, DType::BF16, true);
  const ExecutionPlan p = plan_execution(g, in);
  check_plan(g, p);
  int low = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Layer& l = *g.nodes()[i].layer;
    if (l.mixed_precision() == MixedPrecision::Low && !in.keep_f32[i]) CHECK(p.dtypes[i] == DType::BF16);
    if (l.mixed_precision() == MixedPrecision::F32 || in.keep_f32[i]) CHECK(p.dtypes[i] == DType::F32);
    low += p.dtypes[i] == DType::BF16;
  }
  CHECK(low > 20);
  // The f32 model input is read by the first convolution in bf16: one converted copy of it.
  CHECK(p.input_cast[0].defined());
  CHECK(p.input_cast[0].bytes == g.input_shapes()[0].numel() * 3 * 2);
  // Under fp32 nothing is converted.
  const ExecutionPlan f = plan_execution(g, inputs_for(g, 3, DType::F32, true));
  CHECK_FALSE(f.input_cast[0].defined());
  for (const Region& r : f.cast) CHECK_FALSE(r.defined());
}

TEST_CASE("execution plan: wanted input gradients get regions of their own") {
  Graph g = test::build(R"(
model:
  input: [4, 4, 2]
  layers:
    - {name: c, type: conv2d, filters: 3, kernel: 3, padding: same}
    - {name: r, type: relu}
    - {name: f, type: flatten}
    - {name: d, type: dense, units: 2}
)");
  ExecutionInputs in = inputs_for(g, 5, DType::F32, true);
  CHECK_FALSE(plan_execution(g, in).input_grad[0].defined());
  in.input_grads[0] = true;
  const ExecutionPlan p = plan_execution(g, in);
  check_plan(g, p);
  REQUIRE(p.input_grad[0].defined());
  CHECK(p.input_grad[0].bytes == 5 * 4 * 4 * 2 * 4);
  for (size_t i = 0; i < g.nodes().size(); ++i) CHECK_FALSE(overlap(p.input_grad[0], p.grad[i]));
}
