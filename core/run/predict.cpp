// Checkpoint prediction: the inputs through the evaluation loader (normalisation without random
// transforms), one replica's forward pass to the logits, softmax (or sigmoid) on the host.
#include "core/run/predict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/data/loader.h"
#include "core/run/evaluate.h"
#include "core/run/plan.h"
#include "core/run/predict_inputs.h"
#include "core/runtime/inference.h"

namespace trainer {
namespace {

// Probabilities of one row of logits, in double: softmax over k > 1 units, sigmoid for one.
void probabilities(const float* logits, int64_t k, float* out) {
  if (k == 1) {
    const double p = 1.0 / (1.0 + std::exp(-double(logits[0])));
    out[0] = float(1.0 - p);
    out[1] = float(p);
    return;
  }
  const double m = *std::max_element(logits, logits + k);
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += std::exp(double(logits[j]) - m);
  for (int64_t j = 0; j < k; ++j) out[j] = float(std::exp(double(logits[j]) - m) / sum);
}

}  // namespace

Prediction predict_checkpoint(const RunSpec& e, const CheckpointInfo& c, const std::vector<std::string>& inputs,
                              const PredictOptions& o) {
  const RunPlan plan = plan_run(one_copy(e));
  if (plan.logits_positions > 0)
    throw cfg::ConfigError(c.weights, fmt::format("the model scores each of {} positions (a language model): "
                                                  "`trainer generate` samples text from it",
                                                  plan.logits_positions));
  std::vector<Shape> shapes = plan.trainee.graph->input_shapes();
  PredictInputs in = read_predict_inputs(inputs, shapes, int64_t(e.data.max_image_bytes >> 20));

  Prediction out;
  out.names = in.names;
  out.failed = in.failed;
  const int64_t units = plan.logits_units, k = units == 1 ? 2 : units;
  out.classes = c.classes;
  if (int64_t(out.classes.size()) != k) {
    out.classes.clear();
    for (int64_t j = 0; j < k; ++j) out.classes.push_back(std::to_string(j));
  }
  out.averaged = o.weights == LoadWeights::Average && has_ema(c);
  out.device = plan.devices[0].str();
  const int64_t n = in.samples->size();
  if (n == 0) return out;

  // The evaluation loader's preprocessing: the config's augment without its random transforms
  // (an evaluation crop is the whole image: inputs are decoded at the model's size), with the
  // statistics stored in the checkpoint.
  Augment aug = e.data.augment.without_random();
  aug.crop = Augment::Crop{};
  auto stats = std::make_shared<NormStats>(checkpoint_stats(c));
  if (aug.needs_stats() && stats->mean.empty())
    throw cfg::ConfigError(c.weights, "the checkpoint holds no normalisation statistics, but data.augment.mean needs them");
  LoaderOptions lo;
  lo.batch_size = o.batch_size > 0 ? o.batch_size : e.train.eval_batch_size > 0 ? e.train.eval_batch_size : e.train.batch_size;
  lo.shuffle = false;
  lo.augment = aug;
  lo.stats = stats;
  lo.workers = 0;
  Loader loader(in.samples, lo);

  InferenceModel model(plan.trainee, plan.devices[0], plan.threads);
  load_checkpoint(c, model.state(), false, o.weights);
  out.probs.assign(size_t(n * k), 0.0f);
  std::vector<float> logits;
  loader.start_epoch(0);
  int64_t row = 0;
  for (Batch b; loader.next(b);) {
    model.logits(b.images, logits);
    for (int64_t i = 0; i < b.size; ++i, ++row)
      probabilities(logits.data() + i * units, units, out.probs.data() + row * k);
  }
  return out;
}

}  // namespace trainer
