// Text sampling from a byte-level language model: the causal window slid along the text, the next byte drawn from softmax(logits / temperature) over the top k.
#include "core/run/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/run/evaluate.h"
#include "core/run/plan.h"
#include "core/runtime/inference.h"

namespace trainer {
namespace {

constexpr int64_t kBytes = 256;

// The next byte from one position's scores: the most likely (lowest index on ties) at temperature
// 0, else a draw from softmax(logits / temperature) restricted to the top_k most likely (all when
// 0), in double, with u uniform in [0, 1) from the 53 high bits of the stream.
int next_byte(const float* logits, double temperature, int top_k, std::mt19937_64& rng) {
  std::vector<int> order(kBytes);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return order[0];
  const size_t k = top_k > 0 ? std::min<size_t>(size_t(top_k), order.size()) : order.size();
  std::vector<double> p(k);
  const double top = logits[order[0]];
  double sum = 0;
  for (size_t j = 0; j < k; ++j) sum += p[j] = std::exp((double(logits[order[j]]) - top) / temperature);
  const double u = double(rng() >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (size_t j = 0; j < k; ++j)
    if ((acc += p[j]) > u) return order[j];
  return order[k - 1];
}

// Why this model cannot be sampled byte by byte, or "".
std::string unsuitable(const RunPlan& plan) {
  const Graph& g = *plan.trainee.graph;
  const std::vector<Shape> in = g.input_shapes();
  if (plan.logits_positions == 0)
    return "the model scores whole samples, not each position: generate needs a language model (logits [time, 256])";
  if (plan.logits_units != kBytes)
    return fmt::format("the model scores {} classes per position: generate samples bytes (a `text` set's 256 ids)",
                       plan.logits_units);
  if (in.size() != 1 || in[0] != Shape{plan.logits_positions})
    return fmt::format("generate needs one input of {} byte ids, the model takes {}", plan.logits_positions,
                       in.size() == 1 ? in[0].str() : fmt::format("{} inputs", in.size()));
  for (const GraphNode& n : g.nodes())
    if (n.layer->type() == "multi_head_attention" && !n.layer->describe().flag("causal"))
      return fmt::format("layer '{}' attends to later positions (causal: false): the next byte's scores would "
                         "depend on bytes not yet sampled",
                         n.layer->name());
  return "";
}

}  // namespace

Generated generate_text(const RunSpec& e, const CheckpointInfo& c, const GenerateOptions& o,
                        const std::function<void(char)>& on_byte) {
  const RunPlan plan = plan_run(one_copy(e));
  if (const std::string why = unsuitable(plan); !why.empty()) throw cfg::ConfigError(c.weights, why);
  Generated out;
  out.window = plan.logits_positions;
  out.averaged = o.weights == LoadWeights::Average && has_ema(c);
  out.device = plan.devices[0].str();
  InferenceModel model(plan.trainee, plan.devices[0], plan.threads);
  load_checkpoint(c, model.state(), false, o.weights);

  const int64_t T = out.window;
  std::string text = o.prompt.empty() ? std::string("\n") : o.prompt;
  Tensor ids = Tensor::empty(Shape{1, T});
  std::vector<float> logits;
  std::mt19937_64 rng(o.seed);
  for (int64_t i = 0; i < o.bytes; ++i) {
    // The last T bytes at positions 0..n-1; the positions after them are causally invisible to n-1.
    const int64_t n = std::min<int64_t>(T, int64_t(text.size()));
    const char* ctx = text.data() + text.size() - size_t(n);
    float* x = ids.f32();
    for (int64_t t = 0; t < T; ++t) x[t] = t < n ? float(static_cast<unsigned char>(ctx[t])) : 0.0f;
    model.logits(ids, logits);
    const char b = char(next_byte(logits.data() + (n - 1) * kBytes, o.temperature, o.top_k, rng));
    text += b;
    out.text += b;
    if (on_byte) on_byte(b);
  }
  return out;
}

}  // namespace trainer
