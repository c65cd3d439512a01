// ExecutionPlan, a pure function: every buffer inside the arena and aligned, no two live buffers
// overlapping, in-place and fused nodes and channel slices where the rules allow them, types per precision.
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

ExecutionInputs inputs_for(const Graph& g, int64_t batch, DType low, bool fuse, bool slices = false,
                           bool join = false, bool pass = false) {
  ExecutionInputs in;
  in.batch = batch;
  in.low = low;
  in.input_dtypes.assign(g.input_shapes().size(), DType::F32);
  in.keep_f32.assign(g.nodes().size(), false);
  in.keep_f32[size_t(g.output_node())] = true;
  in.input_grads.assign(g.input_shapes().size(), false);
  in.can_fuse = [fuse](int, ActKind k) { return fuse && (k == ActKind::Relu || k == ActKind::Relu6); };
  if (slices) in.can_slice = [&g](int node) { return g.nodes()[size_t(node)].layer->type() == "batchnorm"; };
  if (join) in.can_join = [&g](int node) { return g.nodes()[size_t(node)].layer->type() == "batchnorm"; };
  if (pass) in.can_pass_grad = [&g](int node, int) { return g.nodes()[size_t(node)].layer->type() == "add"; };
  return in;
}

bool overlap(const Region& a, const Region& b) {
  return a.defined() && b.defined() && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// The backward lifetime of each node's output gradient, in steps from the start of backward:
// from its last consumer's backward (or 0 when nothing in the graph consumes it) to its own; a
// sibling group's member writes its input's gradient at its leader's backward.
std::vector<std::pair<size_t, size_t>> lifetimes(const Graph& g, const ExecutionPlan& p, size_t runs) {
  const size_t n = g.nodes().size();
  std::vector<std::pair<size_t, size_t>> life(n);
  for (size_t j = 0; j < n; ++j) life[j] = {0, n - 1 - j};
  std::vector<bool> consumed(n, false);
  for (size_t i = 0; i < runs; ++i)
    for (int j : g.nodes()[i].inputs)
      if (!is_model_input(j)) {
        const size_t at = p.sibling_leader[i] >= 0 ? size_t(p.sibling_leader[i]) : i;
        life[size_t(j)].first = consumed[size_t(j)] ? std::min(life[size_t(j)].first, n - 1 - at) : n - 1 - at;
        consumed[size_t(j)] = true;
      }
  return life;
}

// Whether node i's output (and gradient) lies in node j's buffer by design: in place, or channel
// slices of one concat (whose bytes interleave).
bool same_buffer(const ExecutionPlan& p, size_t i, size_t j) {
  const auto owner = [&](size_t k) {
    if (p.slice_of[k] >= 0) return size_t(p.slice_of[k]);
    return p.in_place_of[k] >= 0 ? size_t(p.in_place_of[k]) : k;
  };
  return owner(i) == owner(j);
}

// Nodes from `runs` on never run (ExecutionInputs::last): they must have no buffers at all.
void check_plan(const Graph& g, const ExecutionPlan& p, size_t runs = SIZE_MAX) {
  const size_t n = std::min(g.nodes().size(), runs);
  for (size_t i = n; i < g.nodes().size(); ++i) {
    INFO("node " << i << " " << g.nodes()[i].layer->name() << " never runs");
    CHECK_FALSE(p.act[i].defined());
    CHECK_FALSE(p.grad[i].defined());
    CHECK_FALSE(p.cast[i].defined());
    CHECK(p.in_place_of[i] == -1);
    CHECK(p.fused_into[i] == -1);
    CHECK(p.slice_of[i] == -1);
    CHECK(p.sibling_leader[i] == -1);
  }
  std::vector<Region> all;
  for (size_t i = 0; i < n; ++i) all.insert(all.end(), {p.act[i], p.cast[i], p.grad[i]});
  all.insert(all.end(), p.input_cast.begin(), p.input_cast.end());
  all.insert(all.end(), p.input_grad.begin(), p.input_grad.end());
  all.push_back(p.scratch);
  for (const Region& r : all) {  // a channel slice starts inside its concat's region
    if (!r.defined()) continue;
    if (r.row_stride == 0) CHECK(r.offset % 64 == 0);
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
    // A channel slice: columns [slice_channel, ...) of its concat's output and gradient, rows
    // the concat's channels apart, of the concat's type.
    if (p.slice_of[i] >= 0) {
      const size_t c = size_t(p.slice_of[i]);
      const int64_t at = p.slice_channel[i] * int64_t(dtype_size(p.dtypes[i]));
      CHECK(g.nodes()[c].layer->joins_channels());
      CHECK(p.act[i].offset == p.act[c].offset + at);
      CHECK(p.grad[i].offset == p.grad[c].offset + at);
      CHECK(p.act[i].row_stride == g.nodes()[c].shape.back());
      CHECK(p.grad[i].row_stride == g.nodes()[c].shape.back());
      CHECK(p.slice_channel[i] + g.nodes()[i].shape.back() <= g.nodes()[c].shape.back());
      CHECK(p.dtypes[i] == p.dtypes[c]);
    } else {
      CHECK(p.act[i].row_stride == 0);
      CHECK(p.grad[i].row_stride == 0);
    }
    // Activations, converted copies and gradients never overlap one another's kind.
    for (size_t j = 0; j < n; ++j) {
      if (i != j && !same_buffer(p, i, j)) CHECK_FALSE(overlap(p.act[i], p.act[j]));
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
  // one buffer on purpose: the consumer's backward writes its input's gradient over its own; so
  // does a consumer passing its gradient through, grad_over, which must be the input's last).
  const auto life = lifetimes(g, p, n);
  for (size_t j = 0; j < n; ++j) {
    const int i = p.grad_over.empty() ? -1 : p.grad_over[j];
    if (i < 0) continue;
    INFO(g.nodes()[j].layer->name() << "'s gradient in " << g.nodes()[size_t(i)].layer->name() << "'s");
    CHECK(p.grad[j].offset == p.grad[size_t(i)].offset);
    CHECK(p.dtypes[j] == p.dtypes[size_t(i)]);
    CHECK(life[j].first == life[size_t(i)].second);  // it starts where the consumer's ends
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      if (same_buffer(p, i, j)) continue;
      if (!p.grad_over.empty() && (p.grad_over[i] == int(j) || p.grad_over[j] == int(i))) continue;
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

TEST_CASE("execution plan: concat inputs written in place as channel slices where the writer can") {
  const Graph& g = minigooglenet();
  const auto& nodes = g.nodes();
  for (DType low : {DType::F32, DType::BF16}) {
    INFO(dtype_name(low));
    const ExecutionPlan p = plan_execution(g, inputs_for(g, 3, low, true, true));
    check_plan(g, p);
    // Every concat input that is a fused ReLU over batch norm is a slice, with its batch norm; the
    // downsample modules' max pooling (which cannot write one) is copied.
    int sliced = 0, copied = 0;
    for (size_t c = 0; c < nodes.size(); ++c) {
      if (!nodes[c].layer->joins_channels()) continue;
      int64_t channel = 0;
      for (int k : nodes[c].inputs) {
        const size_t ku = size_t(k);
        INFO(nodes[c].layer->name() << " input " << nodes[ku].layer->name());
        if (nodes[ku].layer->type() == "relu") {
          REQUIRE(p.fused_into[ku] >= 0);
          CHECK(p.slice_of[ku] == int(c));
          CHECK(p.slice_of[size_t(p.fused_into[ku])] == int(c));
          CHECK(p.slice_channel[ku] == channel);
          ++sliced;
        } else {
          CHECK(p.slice_of[ku] == -1);
          ++copied;
        }
        channel += nodes[ku].shape.back();
      }
    }
    CHECK(sliced == 2 * 8 + 2);  // eight inception modules, two downsample modules
    CHECK(copied == 2);
    // The concats' inputs take no memory of their own: less arena than copying them.
    const ExecutionPlan plain = plan_execution(g, inputs_for(g, 3, low, true, false));
    CHECK(p.activation_bytes < plain.activation_bytes);
    for (size_t i = 0; i < nodes.size(); ++i) CHECK(plain.slice_of[i] == -1);
  }
  // Only an activation fused into its writer: unfused ReLUs (running in place over batch norm's
  // output) would have to write the slice themselves.
  const ExecutionPlan unfused = plan_execution(g, inputs_for(g, 3, DType::F32, false, true));
  check_plan(g, unfused);
  for (size_t i = 0; i < nodes.size(); ++i) CHECK(unfused.slice_of[i] == -1);
  // Not an input read from outside (kept), nor one of another type than the concat.
  ExecutionInputs in = inputs_for(g, 3, DType::F32, true, true);
  const int relu = g.node_index("incep1/conv_1x1/relu");
  REQUIRE(relu >= 0);
  in.keep_f32[size_t(relu)] = true;
  const ExecutionPlan kept = plan_execution(g, in);
  check_plan(g, kept);
  CHECK(kept.slice_of[size_t(relu)] == -1);
  CHECK(kept.slice_of[size_t(g.node_index("incep1/conv_3x3/relu"))] == g.node_index("incep1/concat"));
}

// Two branches of batch norm + ReLU joined by a concat, the second one layer longer.
const char* const kTwoBranches = R"(
model:
  input: [4, 4, 3]
  layers:
    - {name: a, type: conv2d, filters: 4, kernel: 1, inputs: [input]}
    - {name: an, type: batchnorm}
    - {name: ar, type: relu}
    - {name: b, type: conv2d, filters: 5, kernel: 3, padding: same, inputs: [input]}
    - {name: bb, type: conv2d, filters: 6, kernel: 1}
    - {name: bn, type: batchnorm}
    - {name: br, type: relu}
    - {name: cat, type: concat, inputs: [ar, br]}
    - {name: f, type: flatten}
    - {name: d, type: dense, units: 2}
)";

TEST_CASE("execution plan: a concat's gradient lives until its slices' backward") {
  // The concat's gradient is written by its consumers' backward and read by its slices' writers
  // (batch norm), long after the concat's own backward: a gradient live in between (the other
  // branch's) must not take its bytes.
  Graph g = test::build(kTwoBranches);
  const ExecutionPlan p = plan_execution(g, inputs_for(g, 2, DType::F32, true, true));
  check_plan(g, p);
  const int cat = g.node_index("cat");
  CHECK(p.slice_of[size_t(g.node_index("an"))] == cat);
  CHECK(p.slice_of[size_t(g.node_index("bn"))] == cat);
  // The gradients of the nodes between the first slice's writer and the concat ("b", "bb") are
  // live while the concat's gradient still holds the first slice's.
  const Region& cg = p.grad[size_t(cat)];
  for (const char* name : {"b", "bb"}) {
    INFO(name);
    CHECK_FALSE(overlap(cg, p.grad[size_t(g.node_index(name))]));
  }
}

TEST_CASE("execution plan: sibling batch norms run at the last one's turn, their inputs' gradients live from there") {
  // The first sibling's input gradient ("a"'s) is written at the second's backward ("bn"), before
  // "bb" and "b" run theirs: their gradients must not take its bytes, as they may without groups.
  Graph g = test::build(kTwoBranches);
  const auto at = [&](const char* name) { return size_t(g.node_index(name)); };
  const ExecutionPlan p = plan_execution(g, inputs_for(g, 2, DType::F32, true, true, true));
  check_plan(g, p);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    INFO(g.nodes()[i].layer->name());
    CHECK(p.sibling_leader[i] == (i == at("an") || i == at("bn") ? int(at("bn")) : -1));
  }
  CHECK_FALSE(overlap(p.grad[at("a")], p.grad[at("bb")]));
  CHECK_FALSE(overlap(p.grad[at("a")], p.grad[at("b")]));
  // Without groups, "a"'s gradient starts at "an"'s backward and shares bytes with one of them.
  const ExecutionPlan alone = plan_execution(g, inputs_for(g, 2, DType::F32, true, true, false));
  check_plan(g, alone);
  for (int l : alone.sibling_leader) CHECK(l == -1);
  CHECK((overlap(alone.grad[at("a")], alone.grad[at("bb")]) || overlap(alone.grad[at("a")], alone.grad[at("b")])));
  // No group without slices, nor where a member's input is read elsewhere too, nor with another
  // fused activation.
  const ExecutionPlan unsliced = plan_execution(g, inputs_for(g, 2, DType::F32, true, false, true));
  for (int l : unsliced.sibling_leader) CHECK(l == -1);
  Graph shared = test::build(R"(
model:
  input: [4, 4, 3]
  layers:
    - {name: a, type: conv2d, filters: 4, kernel: 1, inputs: [input]}
    - {name: an, type: batchnorm}
    - {name: ar, type: relu}
    - {name: bn, type: batchnorm, inputs: [a]}
    - {name: br, type: relu6}
    - {name: cat, type: concat, inputs: [ar, br]}
    - {name: f, type: flatten}
    - {name: d, type: dense, units: 2}
)");
  const ExecutionPlan s = plan_execution(shared, inputs_for(shared, 2, DType::F32, true, true, true));
  check_plan(shared, s);
  CHECK(s.slice_of[size_t(shared.node_index("an"))] >= 0);
  for (int l : s.sibling_leader) CHECK(l == -1);
}

// A trainer's engine runs up to the loss's logits (the output softmax is the loss's): the plan gives
// the output node no buffers, nor scratch for its backward. For GPT-2's 50257-way head that is
// three logits-sized buffers (786 MiB each at batch 4 x 1024) out of the arena: the softmax's
// output, its gradient and the scratch sized for its input's gradient (`trainer bench --layers`
// prints the arena).
TEST_CASE("execution plan: nodes after the last one run get no buffers, and the rest is planned as before") {
  static const Graph gpt(load_run_spec(TRAINER_SOURCE_DIR "/configs/gpt_bytes.yaml", {}).model);
  for (const Graph* g : {&minigooglenet(), &gpt}) {
    const int out = g->output_node(), logits = g->nodes()[size_t(out)].inputs[0];
    REQUIRE(logits == out - 1);
    for (DType low : {DType::F32, DType::BF16})
      for (int64_t batch : {1, 3}) {
        INFO(g->nodes()[size_t(logits)].layer->name() << ", " << dtype_name(low) << ", batch " << batch);
        ExecutionInputs in = inputs_for(*g, batch, low, true, true, true);
        in.keep_f32[size_t(logits)] = true;  // as the engine keeps them
        const ExecutionPlan whole = plan_execution(*g, in);
        in.last = logits;
        const ExecutionPlan p = plan_execution(*g, in);
        check_plan(*g, whole);
        check_plan(*g, p, size_t(logits) + 1);
        // Every node that runs keeps its type, in-place and fusion decisions and its output region.
        for (int i = 0; i <= logits; ++i) {
          CHECK(p.dtypes[size_t(i)] == whole.dtypes[size_t(i)]);
          CHECK(p.in_place_of[size_t(i)] == whole.in_place_of[size_t(i)]);
          CHECK(p.fused_into[size_t(i)] == whole.fused_into[size_t(i)]);
          CHECK(p.slice_of[size_t(i)] == whole.slice_of[size_t(i)]);
          CHECK(p.act[size_t(i)].offset == whole.act[size_t(i)].offset);
          CHECK(p.grad[size_t(i)].bytes == whole.grad[size_t(i)].bytes);
        }
        // The output's own output region fewer bytes (64-byte aligned), gradients and scratch no
        // more than before (how much less depends on which buffers the output's gradient shared
        // and which node's inputs sized the scratch: the softmax's, for GPT-2's 50257 columns);
        // the logits' gradient stays, f32.
        const int64_t logits_bytes = g->nodes()[size_t(out)].shape.numel() * batch * 4;
        CHECK(p.grad[size_t(logits)].bytes == logits_bytes);
        CHECK(p.dtypes[size_t(logits)] == DType::F32);
        CHECK(p.arena_bytes <= whole.arena_bytes - (logits_bytes + 63) / 64 * 64);
        CHECK(p.gradient_bytes <= whole.gradient_bytes);
        CHECK(p.scratch.bytes <= whole.scratch.bytes);
      }
  }
}

// Gradients passed through (grad_over): in a pre-norm GPT each residual add is its first input's
// last consumer, so the residual stream's gradient stays in one buffer from the last block to the
// first (each add's input gradient is its own, nothing copied) — and where the add is not the last
// consumer, or the types differ, nothing is shared. The rest of the plan holds its rules.
TEST_CASE("execution plan: an add's input gradient takes its output gradient's buffer where it is that input's last consumer") {
  const Graph g(load_run_spec(TRAINER_SOURCE_DIR "/configs/gpt_bytes.yaml", {}).model);
  const auto& nodes = g.nodes();
  for (DType low : {DType::F32, DType::BF16}) {
    INFO(dtype_name(low));
    const ExecutionPlan p = plan_execution(g, inputs_for(g, 4, low, true, false, false, true));
    check_plan(g, p);
    int shared = 0;
    for (size_t j = 0; j < nodes.size(); ++j) {
      if (p.grad_over[j] < 0) continue;
      ++shared;
      const GraphNode& add = nodes[size_t(p.grad_over[j])];
      CHECK(add.layer->type() == "add");
      CHECK(add.inputs[0] == int(j));  // the residual stream, not the branch
    }
    CHECK(shared == 8);  // 4 blocks x 2 adds: pos's and each res's gradient
    const ExecutionPlan off = plan_execution(g, inputs_for(g, 4, low, true));
    CHECK(std::count(off.grad_over.begin(), off.grad_over.end(), -1) == int64_t(nodes.size()));
    CHECK(p.gradient_bytes <= off.gradient_bytes);
  }
}
