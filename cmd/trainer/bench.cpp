// `trainer bench CONFIG [--steps N] [--warmup N] [--layers] [--threads N] [--set k=v]...`
#include <fmt/format.h>
#include <sys/resource.h>

#include "cmd/trainer/command.h"
#include "core/engine/bench.h"

namespace trainer::cli {
namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> sets;
  int threads = 0, cpu = 0;
  std::string gpus;
  BenchOptions o;
};

int run_bench(const BenchArgs& a) {
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(a.gpus, a.cpu, a.threads)) sets.push_back(s);
  Experiment e = load_experiment(a.config, sets);
  BenchResult r = bench(e, a.o);
  for (const std::string& l : r.layer_lines) fmt::print("{}\n", l);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // peak resident set of the whole process (model, buffers, oneDNN caches)
  const double peak_rss_mb = double(ru.ru_maxrss) / 1024;
  fmt::print("{{\"model\": \"{}\", \"device\": \"{}\", \"threads\": {}, \"batch\": {}, \"steps\": {}, "
             "\"images_per_sec\": {:.2f}, \"ms_per_step\": {:.2f}, \"gflops_per_sec\": {:.1f}, "
             "\"allreduce_ms_per_step\": {:.2f}, \"allreduce_hidden\": {:.3f}, \"peak_rss_mb\": {:.1f}{}}}\n",
             e.name, r.device, r.threads, r.batch, a.o.steps, r.images_per_second, r.ms_per_step, r.gflops_per_second,
             r.allreduce_ms_per_step, r.hidden_fraction, peak_rss_mb,
             r.bubble >= 0 ? fmt::format(", \"microbatches\": {}, \"bubble\": {:.3f}", r.microbatches, r.bubble) : "");
  return kOk;
}

const RegisterCommand reg({"bench", "Time training steps on synthetic batches (images/s, ms/step, per-layer times)",
                           [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("config", a->config, "Experiment YAML file")->required();
  app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
  app.add_option("--steps", a->o.steps, "Timed steps (default 20)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a->o.warmup, "Untimed steps first (default 3)")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", a->threads, "CPU compute threads per replica")->check(CLI::PositiveNumber);
  CLI::Option* gpus = app.add_option("--gpus", a->gpus, "GPUs: a count, a list of ordinals (0,2 or 0,0), or all");
  app.add_option("--cpu", a->cpu, "CPU replicas")->check(CLI::PositiveNumber)->excludes(gpus);
  app.add_flag("--layers", a->o.layers, "Also time every layer's forward and backward");
  return [a] { return run_bench(*a); };
}});

}  // namespace
}  // namespace trainer::cli
