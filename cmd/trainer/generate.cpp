// `trainer generate RUN_DIR|CHECKPOINT [--prompt TEXT] [--bytes N] [--temperature T] [--top-k K] [--seed S]`
#include <fmt/format.h>

#include <cstdio>

#include "cmd/trainer/checkpoint_run.h"
#include "cmd/trainer/command.h"
#include "core/io/printable.h"
#include "core/run/generate.h"

namespace trainer::cli {
namespace {

struct GenerateArgs {
  std::string target, config, gpus;
  std::vector<std::string> sets;
  GenerateOptions o;
  int threads = 0;
  bool no_ema = false, quiet = false;
};

int generate(GenerateArgs& a) {
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(a.gpus, 0, a.threads)) sets.push_back(s);
  const auto [c, e] = open_checkpoint_run(a.target, a.config, sets);
  a.o.weights = a.no_ema ? LoadWeights::Trained : LoadWeights::Average;
  if (!a.quiet)
    fmt::print(stderr, "Checkpoint: {} (epoch {}, step {}); sampling {} bytes at temperature {}{}, seed {}\n",
               printable(c.weights), c.state.epoch + (c.state.step_in_epoch ? 1 : 0), c.state.global_step, a.o.bytes,
               a.o.temperature, a.o.top_k ? fmt::format(", top-k {}", a.o.top_k) : "", a.o.seed);
  // The prompt, then each byte as it is sampled (stdout, unbuffered by line: the text appears as it comes).
  bool started = false;
  const Generated g = generate_text(e, c, a.o, [&](char b) {
    if (!started) {
      std::fwrite(a.o.prompt.data(), 1, a.o.prompt.size(), stdout);
      started = true;
    }
    std::fputc(b, stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  if (!a.quiet)
    fmt::print(stderr, "({} bytes on {}, {} weights, a window of {} bytes)\n", g.text.size(), g.device,
               g.averaged ? "moving-average" : "trained", g.window);
  return kOk;
}

const RegisterCommand reg_generate(
    {"generate", "Sample text from a byte-level language model's checkpoint (a `text` set's run)", [](CLI::App& app) {
       auto a = std::make_shared<GenerateArgs>();
       app.add_option("target", a->target, "A run directory (its newest valid checkpoint) or a checkpoint file")
           ->required();
       app.add_option("--prompt", a->o.prompt, "The text to continue (default: a line break)");
       app.add_option("--bytes", a->o.bytes, "How many bytes to sample (default 300)")->check(CLI::Range(1, 1 << 24));
       app.add_option("--temperature", a->o.temperature,
                      "Divide the scores by it before sampling: below 1 more likely text, above 1 more varied; 0 "
                      "always the most likely byte (default 1)")
           ->check(CLI::Range(0.0, 100.0));
       app.add_option("--top-k", a->o.top_k, "Sample among the K most likely bytes only (default: all)")
           ->check(CLI::Range(0, 256));
       app.add_option("--seed", a->o.seed, "The sampling's random seed (default 0: the same text every time)");
       app.add_flag("--no-ema", a->no_ema, "Use the trained weights, not their moving average (train.ema)");
       app.add_flag("--quiet", a->quiet, "Print only the text (no checkpoint line on stderr)");
       app.add_option("--config", a->config, "The config to build the model from (default: the run's config.yaml)");
       app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
       app.add_option("--gpus", a->gpus, "Run on this GPU (default: the config's first device)");
       app.add_option("--threads", a->threads, "CPU compute threads")->check(CLI::PositiveNumber);
       return [a] { return generate(*a); };
     }});

}  // namespace
}  // namespace trainer::cli
