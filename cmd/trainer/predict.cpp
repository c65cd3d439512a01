// `trainer predict RUN_DIR|CHECKPOINT INPUTS... [--top K] [--csv FILE] [--probs FILE.npy] [--no-ema]`
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "cmd/trainer/checkpoint_run.h"
#include "cmd/trainer/command.h"
#include "core/data/npy_format.h"
#include "core/io/file.h"
#include "core/io/printable.h"
#include "core/run/predict.h"

namespace trainer::cli {
namespace {

struct PredictArgs {
  std::string target, config, csv, probs, gpus;
  std::vector<std::string> inputs, sets;
  int top = 5, threads = 0;
  int64_t batch = 0;
  bool no_ema = false;
};

// The classes of row i by falling probability (ties: the lower index first), the first `top`.
std::vector<size_t> ranked(const Prediction& p, size_t i, size_t top) {
  const size_t k = p.classes.size();
  const float* row = p.probs.data() + i * k;
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return row[a] > row[b]; });
  order.resize(std::min(top, k));
  return order;
}

// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_csv(const std::string& path, const Prediction& p, size_t top) {
  std::string text = "input";
  for (size_t r = 1; r <= top; ++r) text += fmt::format(",class_{},probability_{}", r, r);
  text += "\n";
  for (size_t i = 0; i < p.names.size(); ++i) {
    text += csv_field(p.names[i]);
    const float* row = p.probs.data() + i * p.classes.size();
    for (size_t c : ranked(p, i, top)) text += fmt::format(",{},{:.9g}", csv_field(p.classes[c]), row[c]);
    text += "\n";
  }
  write_file_atomic(path, text);
}

void write_probs(const std::string& path, const Prediction& p) {
  std::string bytes = npy::make_header({int64_t(p.names.size()), int64_t(p.classes.size())}, "<f4");
  bytes.append(reinterpret_cast<const char*>(p.probs.data()), p.probs.size() * sizeof(float));
  write_file_atomic(path, bytes);
}

void print_table(const Prediction& p, size_t top) {
  size_t w = 5;
  for (const std::string& n : p.names) w = std::max(w, std::min<size_t>(printable(n).size(), 60));
  fmt::print("{:<{}}", "input", w);
  for (size_t r = 1; r <= top; ++r) fmt::print("  {:>16}", fmt::format("top-{}", r));
  fmt::print("\n");
  for (size_t i = 0; i < p.names.size(); ++i) {
    fmt::print("{:<{}}", printable(p.names[i]), w);
    const float* row = p.probs.data() + i * p.classes.size();
    for (size_t c : ranked(p, i, top)) fmt::print("  {:>16}", fmt::format("{} {:.4f}", printable(p.classes[c]), row[c]));
    fmt::print("\n");
  }
}

int predict(const PredictArgs& a) {
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(one_gpu(a.gpus), 0, a.threads)) sets.push_back(s);
  const auto [c, e] = open_checkpoint_run(a.target, a.config, sets);
  PredictOptions o;
  o.batch_size = a.batch;
  o.weights = a.no_ema ? LoadWeights::Trained : LoadWeights::Average;
  Prediction p = predict_checkpoint(e, c, a.inputs, o);

  const size_t top = std::min(size_t(a.top), p.classes.size());
  fmt::print("Checkpoint: {} (epoch {}, step {}), {} weights, on {}\n", printable(c.weights),
             c.state.epoch + (c.state.step_in_epoch ? 1 : 0), c.state.global_step,
             p.averaged ? "moving-average (train.ema)" : "trained", p.device);
  if (!p.names.empty()) print_table(p, top);
  if (!a.csv.empty()) write_csv(a.csv, p, top);
  if (!a.probs.empty()) write_probs(a.probs, p);
  // One line per input that gave nothing (the others are in the table and files), exit 3.
  for (const std::string& f : p.failed) fmt::print(stderr, "data error: {}\n", f);
  return p.failed.empty() ? kOk : kData;
}

const RegisterCommand reg_predict({"predict", "Classify images or arrays with a run's checkpoint", [](CLI::App& app) {
  auto a = std::make_shared<PredictArgs>();
  app.add_option("target", a->target, "A run directory (its newest valid checkpoint) or a checkpoint file")->required();
  app.add_option("inputs", a->inputs, "Image files (PNG, JPEG), folders of images, or .npy batches")->required();
  app.add_option("--top", a->top, "How many classes to show per input (default 5)")->check(CLI::PositiveNumber);
  app.add_option("--csv", a->csv, "Write one row per input: the top classes and their probabilities");
  app.add_option("--probs", a->probs, "Write every probability as a float32 .npy array [inputs, classes]");
  app.add_option("--batch", a->batch, "Inputs per forward pass (default: train.eval_batch_size or batch_size)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-ema", a->no_ema, "Use the trained weights, not their moving average (train.ema)");
  app.add_option("--config", a->config, "The config to build the model from (default: the run's config.yaml)");
  app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
  app.add_option("--gpus", a->gpus, "Predict on this GPU (default: the config's first device)");
  app.add_option("--threads", a->threads, "CPU compute threads")->check(CLI::PositiveNumber);
  return [a] { return predict(*a); };
}});

}  // namespace
}  // namespace trainer::cli
