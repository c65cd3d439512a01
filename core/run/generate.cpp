// Text sampling from a language model of bytes (or of tokens, decoded by llm.c's tokenizer file): the causal window slid along the ids, the next drawn from softmax(logits / temperature) over the top k.
#include "core/run/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/data/tokenizer.h"
#include "core/run/evaluate.h"
#include "core/run/plan.h"
#include "core/runtime/inference.h"

namespace trainer {
namespace {

constexpr int64_t kBytes = 256;

// The next id among the first `vocab` from one position's scores: the most likely (lowest index on
// ties) at temperature 0, else a draw from softmax(logits / temperature) restricted to the top_k
// most likely (all when 0), in double, with u uniform in [0, 1) from the 53 high bits of the stream.
int next_id(const float* logits, int64_t vocab, double temperature, int top_k, std::mt19937_64& rng) {
  std::vector<int> order(static_cast<size_t>(vocab));
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

// Why this model cannot be sampled id by id (`vocab` ids: 256 bytes, the tokenizer's, or with
// `ids` the model's), or "".
std::string unsuitable(const RunPlan& plan, int64_t vocab, bool tokenizer, bool ids) {
  const Graph& g = *plan.trainee.graph;
  const std::vector<Shape> in = g.input_shapes();
  if (plan.logits_positions == 0)
    return "the model scores whole samples, not each position: generate needs a language model (logits [time, vocabulary])";
  if (!tokenizer && !ids && plan.logits_units != kBytes)
    return fmt::format("the model scores {} classes per position: generate samples bytes (a `text` set's 256 ids), "
                       "or tokens given their tokenizer (--tokenizer: llm.c's gpt2_tokenizer.bin), or prints "
                       "token ids (--ids)",
                       plan.logits_units);
  if (tokenizer && plan.logits_units < vocab)
    return fmt::format("the model scores {} classes per position, fewer than the tokenizer's {} tokens",
                       plan.logits_units, vocab);
  if (in.size() != 1 || in[0] != Shape{plan.logits_positions})
    return fmt::format("generate needs one input of {} {} ids, the model takes {}", plan.logits_positions,
                       tokenizer || ids ? "token" : "byte", in.size() == 1 ? in[0].str() : fmt::format("{} inputs", in.size()));
  for (const GraphNode& n : g.nodes())
    if (n.layer->type() == "multi_head_attention" && !n.layer->describe().flag("causal"))
      return fmt::format("layer '{}' attends to later positions (causal: false): the next byte's scores would "
                         "depend on bytes not yet sampled",
                         n.layer->name());
  return "";
}

}  // namespace

Generated generate_text(const RunSpec& e, const CheckpointInfo& c, const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_piece) {
  const RunPlan plan = plan_run(one_copy(e));
  TokenDecoder tok;
  const bool tokens = !o.tokenizer.empty();
  if (tokens) tok = read_llmc_tokenizer(o.tokenizer);
  Generated out;
  out.vocab = tokens ? tok.vocab() : o.ids ? plan.logits_units : kBytes;
  if (const std::string why = unsuitable(plan, out.vocab, tokens, o.ids); !why.empty())
    throw cfg::ConfigError(c.weights, why);
  out.window = plan.logits_positions;
  out.averaged = o.weights == LoadWeights::Average && has_ema(c);
  out.device = plan.devices[0].str();
  const auto piece = [&](int32_t id) {
    return o.ids ? std::to_string(id) + " " : tokens ? tok.pieces[size_t(id)] : std::string(1, char(id));
  };
  std::vector<int32_t> ids;  // the context, then the samples
  if (tokens || o.ids) {
    if (o.prompt_tokens.empty() && !tokens)
      throw cfg::ConfigError("--ids", "a model without its tokenizer starts from --prompt-tokens (no end-of-text id is known)");
    ids = o.prompt_tokens.empty() ? std::vector<int32_t>{tok.eot} : o.prompt_tokens;
    for (int32_t id : ids)
      if (id < 0 || id >= out.vocab)
        throw cfg::ConfigError(tokens ? o.tokenizer : std::string("--prompt-tokens"),
                               fmt::format("prompt token {} is outside its {} tokens", id, out.vocab));
  } else {
    const std::string text = o.prompt.empty() ? std::string("\n") : o.prompt;
    for (unsigned char b : text) ids.push_back(int32_t(b));
  }
  for (int32_t id : ids) out.prompt += piece(id);
  InferenceModel model(plan.trainee, plan.devices[0], plan.threads);
  load_checkpoint(c, model.state(), false, o.weights);
  if (on_piece) on_piece(out.prompt);

  const int64_t T = out.window, V = plan.logits_units;
  Tensor x = Tensor::empty(Shape{1, T});
  std::vector<float> logits;
  std::mt19937_64 rng(o.seed);
  for (int64_t i = 0; i < o.count; ++i) {
    // The last T ids at positions 0..n-1; the positions after them are causally invisible to n-1.
    const int64_t n = std::min<int64_t>(T, int64_t(ids.size()));
    const int32_t* ctx = ids.data() + ids.size() - size_t(n);
    for (int64_t t = 0; t < T; ++t) x.f32()[t] = t < n ? float(ctx[t]) : 0.0f;
    model.logits(x, logits, (n - 1) * V, V);  // position n - 1's scores only (not T x V values)
    const int32_t id = next_id(logits.data(), out.vocab, o.temperature, o.top_k, rng);
    ids.push_back(id);
    out.tokens.push_back(id);
    const std::string text = piece(id);
    out.text += text;
    if (on_piece) on_piece(text);
  }
  return out;
}

}  // namespace trainer
