// `trainer generate RUN_DIR|CHECKPOINT [--prompt TEXT | --tokenizer FILE [--prompt-tokens IDS]] [--bytes|--tokens N] [--temperature T] [--top-k K] [--seed S]`
#include <fmt/format.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "cmd/trainer/checkpoint_run.h"
#include "cmd/trainer/command.h"
#include "core/io/printable.h"
#include "core/run/generate.h"

namespace trainer::cli {
namespace {

struct GenerateArgs {
  std::string target, config, gpus, prompt_tokens;
  std::vector<std::string> sets;
  GenerateOptions o;
  int threads = 0;
  bool no_ema = false, quiet = false;
};

// "50256 464, 2068": ids separated by spaces or commas.
std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    char* end = nullptr;
    const long long v = std::strtoll(cur.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX)
      throw cfg::ConfigError("--prompt-tokens", fmt::format("'{}' is not a token id (ids separated by spaces or commas)", cur));
    ids.push_back(int32_t(v));
    cur.clear();
  };
  for (char ch : s) {
    if (ch == ' ' || ch == ',' || ch == '\t') flush();
    else cur += ch;
  }
  flush();
  if (ids.empty()) throw cfg::ConfigError("--prompt-tokens", "no token ids given");
  return ids;
}

int generate(GenerateArgs& a, bool prompt_given) {
  if (a.o.tokenizer.empty() && !a.o.ids && !a.prompt_tokens.empty())
    throw cfg::ConfigError("--prompt-tokens", "a token prompt needs the model's tokenizer (--tokenizer FILE) or --ids");
  if ((!a.o.tokenizer.empty() || a.o.ids) && prompt_given)
    throw cfg::ConfigError("--prompt", "text is a byte-level model's prompt; a token model's is --prompt-tokens (ids: "
                                       "its tokenizer file decodes, it does not encode)");
  if (!a.prompt_tokens.empty()) a.o.prompt_tokens = parse_ids(a.prompt_tokens);
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(one_gpu(a.gpus), 0, a.threads)) sets.push_back(s);
  const auto [c, e] = open_checkpoint_run(a.target, a.config, sets);
  a.o.weights = a.no_ema ? LoadWeights::Trained : LoadWeights::Average;
  if (!a.quiet)
    fmt::print(stderr, "Checkpoint: {} (epoch {}, step {}); sampling {} {} at temperature {}{}, seed {}\n",
               printable(c.weights), c.state.epoch + (c.state.step_in_epoch ? 1 : 0), c.state.global_step, a.o.count,
               a.o.tokenizer.empty() && !a.o.ids ? "bytes" : "tokens", a.o.temperature,
               a.o.top_k ? fmt::format(", top-k {}", a.o.top_k) : "", a.o.seed);
  // The prompt (a token prompt decoded; not the end-of-text a token sample starts from by default),
  // then each sampled piece as it comes (stdout, flushed: the text appears as it comes).
  bool first = true;
  const bool show_prompt = (a.o.tokenizer.empty() && !a.o.ids) || !a.o.prompt_tokens.empty();
  const Generated g = generate_text(e, c, a.o, [&](const std::string& piece) {
    const bool prompt = first;
    first = false;
    if (prompt && !show_prompt) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  const char* unit = a.o.tokenizer.empty() && !a.o.ids ? "bytes" : "tokens";
  if (!a.quiet)
    fmt::print(stderr, "({} {} on {}, {} weights, a window of {} {})\n", g.tokens.size(), unit, g.device,
               g.averaged ? "moving-average" : "trained", g.window, unit);
  return kOk;
}

const RegisterCommand reg_generate(
    {"generate", "Sample text from a language model's checkpoint (bytes, or tokens with llm.c's tokenizer file)", [](CLI::App& app) {
       auto a = std::make_shared<GenerateArgs>();
       app.add_option("target", a->target, "A run directory (its newest valid checkpoint) or a checkpoint file")
           ->required();
       CLI::Option* prompt = app.add_option("--prompt", a->o.prompt, "The text to continue, for a byte-level model (default: a line break)");
       app.add_option("--tokenizer", a->o.tokenizer,
                      "A token model's tokenizer: llm.c's file (gpt2_tokenizer.bin), which decodes the sampled ids");
       app.add_flag("--ids", a->o.ids,
                    "Print the sampled token ids, not their text (a token model without llm.c's tokenizer file: decode "
                    "them with your own; start from --prompt-tokens)");
       app.add_option("--prompt-tokens", a->prompt_tokens,
                      "A token model's context: ids separated by spaces or commas (default: the end-of-text token)");
       app.add_option("--bytes,--tokens", a->o.count, "How many bytes (tokens) to sample (default 300)")
           ->check(CLI::Range(1, 1 << 24));
       app.add_option("--temperature", a->o.temperature,
                      "Divide the scores by it before sampling: below 1 more likely text, above 1 more varied; 0 "
                      "always the most likely byte (default 1)")
           ->check(CLI::Range(0.0, 100.0));
       app.add_option("--top-k", a->o.top_k, "Sample among the K most likely bytes (tokens) only (default: all)")
           ->check(CLI::Range(0, 1 << 24));
       app.add_option("--seed", a->o.seed, "The sampling's random seed (default 0: the same text every time)");
       app.add_flag("--no-ema", a->no_ema, "Use the trained weights, not their moving average (train.ema)");
       app.add_flag("--quiet", a->quiet, "Print only the text (no checkpoint line on stderr)");
       app.add_option("--config", a->config, "The config to build the model from (default: the run's config.yaml)");
       app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
       app.add_option("--gpus", a->gpus, "Run on this GPU (default: the config's first device)");
       app.add_option("--threads", a->threads, "CPU compute threads")->check(CLI::PositiveNumber);
       return [a, prompt] { return generate(*a, prompt->count() > 0); };
     }});

}  // namespace
}  // namespace trainer::cli
