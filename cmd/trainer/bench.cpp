// `trainer bench CONFIG [--steps N] [--warmup N] [--data] [--layers] [--timeline] [--trace FILE]
// [--json] [--threads N] [--cpu N | --gpus LIST] [--set k=v]...`: img/s, ms/step and where a
// step's time goes.
//
// Output: the per-layer lines (--layers), a summary line, the step's parts, then one JSON line
// with all of it (always last: scripts read it with `tail -1`); --json prints the JSON line alone.
#include <fmt/format.h>
#include <sys/resource.h>

#include "cmd/trainer/command.h"
#include "core/run/bench.h"
#include "core/run/ceiling.h"
#include "core/dist/launch.h"
#include "core/run/bench_timeline.h"

namespace trainer::cli {
namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> sets;
  int threads = 0, cpu = 0;
  std::string gpus;
  bool json = false, timeline = false;
  std::string trace;
  BenchOptions o;
};

// The step's parts for people, e.g. (data parallel)
//   Step (rank 0 of 1, ms): forward 120.3  backward 180.1  optimizer 3.2  all-reduce 0.0 (exposed 0.0)
//                           input wait 0.0 (synthetic input)  other 1.2
// and for device parallelism the schedule as one part, then a line per stage.
std::string parts_text(const BenchResult& r) {
  const StepBreakdown& p = r.parts;
  std::string s = fmt::format("Step ({}, ms): ", p.scope);
  if (p.split)
    s += fmt::format("forward {:.1f}  backward {:.1f}", p.forward_ms, p.backward_ms);
  else
    s += fmt::format("forward+backward {:.1f} (GPipe schedule, wall time)", p.forward_backward_ms);
  s += fmt::format("  optimizer {:.1f}  {} {:.1f} (exposed {:.1f})", p.optimizer_ms,
                   p.split ? "all-reduce" : "shared-gradient sum", p.allreduce_ms, p.exposed_allreduce_ms);
  if (p.split) s += fmt::format("  waiting for other replicas {:.1f}", p.skew_ms);
  s += fmt::format("  input wait {:.1f} ({})", p.input_wait_ms, p.data ? "training data" : "synthetic input");
  s += fmt::format("  other {:.1f}\n", r.ms_per_step - p.accounted_ms());
  for (size_t i = 0; i < p.stages.size(); ++i)
    s += fmt::format("  stage {} on {}: busy {:.1f} (forward {:.1f}, backward {:.1f}), waiting for other stages {:.1f}, "
                     "optimizer {:.1f}\n", i, p.stages[i].device, p.stages[i].busy_ms, p.stages[i].forward_ms,
                     p.stages[i].busy_ms - p.stages[i].forward_ms, p.stages[i].wait_ms, p.stages[i].optimizer_ms);
  return s;
}

// The step's parts as fields of the JSON line; forward_ms and backward_ms are null where only
// their sum is measured (device parallel).
void add_parts(JsonLine& j, const BenchResult& r) {
  const StepBreakdown& p = r.parts;
  auto ms = [](double v) { return json_rounded(v, 3); };
  j["breakdown"] = p.scope;
  j["input"] = p.data ? "data" : "synthetic";
  j["forward_ms"] = p.split ? JsonLine(ms(p.forward_ms)) : JsonLine(nullptr);
  j["backward_ms"] = p.split ? JsonLine(ms(p.backward_ms)) : JsonLine(nullptr);
  j["forward_backward_ms"] = ms(p.forward_backward_ms);
  j["optimizer_ms"] = ms(p.optimizer_ms);
  j["allreduce_ms"] = ms(p.allreduce_ms);
  j["exposed_allreduce_ms"] = ms(p.exposed_allreduce_ms);
  j["skew_ms"] = ms(p.skew_ms);
  j["input_wait_ms"] = ms(p.input_wait_ms);
  j["other_ms"] = ms(r.ms_per_step - p.accounted_ms());
  if (p.stages.empty()) return;
  JsonLine stages = JsonLine::array();
  for (const auto& st : p.stages)
    stages.push_back({{"device", st.device}, {"busy_ms", ms(st.busy_ms)}, {"forward_ms", ms(st.forward_ms)},
                      {"backward_ms", ms(st.busy_ms - st.forward_ms)}, {"wait_ms", ms(st.wait_ms)},
                      {"optimizer_ms", ms(st.optimizer_ms)}});
  j["stages"] = stages;
}

int run_bench(const BenchArgs& a) {
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(a.gpus, a.cpu, a.threads)) sets.push_back(s);
  RunSpec e = load_run_spec(a.config, sets);
  BenchResult r = bench(e, a.o);
  // Several processes (mpirun): process 0 holds global rank 0's figures and reports alone (with
  // its own replicas' timelines).
  if (this_process().rank != 0) return kOk;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // peak resident set of the whole process (model, buffers, oneDNN caches)
  const double peak_rss_mb = double(ru.ru_maxrss) / 1024;
  if (!a.json) {
    if (a.o.layers && r.layer_lines.empty())
      fmt::print("Note: --layers times the layers of data-parallel replicas only\n");
    for (const std::string& l : r.layer_lines) fmt::print("{}\n", l);
    fmt::print("{} on {} ({} threads, {}), batch {}, {} steps after {} warm-up: {:.1f} img/s, {:.2f} ms/step, "
               "{:.1f} GFLOP/s, {:.2f} cores busy, peak RSS {:.0f} MiB{}{}\n",
               e.name, r.device, r.threads, precision_name(e.precision), r.batch, a.o.steps, a.o.warmup,
               r.images_per_second, r.ms_per_step, r.gflops_per_second, r.cpu_cores, peak_rss_mb,
               r.peak_device_mb > 0 ? fmt::format(", peak device memory {:.0f} MiB", r.peak_device_mb) : "",
               r.bubble >= 0 ? fmt::format(", {} micro-batches, bubble {:.1f}%", r.microbatches, 100 * r.bubble) : "");
    if (r.peak_device_mb > 0)  // a GPU's step: one recorded program, or launched op by op
      fmt::print("Step: {}; the host waited for the device {:.2f} times a step\n",
                 r.step_graph ? "one CUDA graph, replayed (devices.cuda_graphs)" : "launched kernel by kernel (not a CUDA graph)",
                 r.host_syncs_per_step);
    if (r.accumulate > 1)
      fmt::print("Accumulation: {} micro-batches per optimizer step (a step above is all of them); {:.2f} gradient "
                 "all-reduces per step\n", r.accumulate, r.gradient_allreduces_per_step);
    if (r.ceiling_gflops > 0)
      fmt::print("Ceiling: {:.2f} of what this machine's kernels reach on one large convolution with the same threads "
                 "({:.1f} GFLOP/s; on a large GEMM {:.1f}; {})\n",
                 r.gflops_per_second / r.ceiling_gflops, r.ceiling_gflops, r.gemm_ceiling_gflops,
                 r.ceiling_cached ? "measured before on this machine; TRAINER_CEILING=measure measures it again"
                                  : "measured now, kept in " + ceiling_cache_path());
    fmt::print("{}", parts_text(r));
    if (a.timeline) fmt::print("{}", timeline_text(r.timelines));
  }
  if (!a.trace.empty()) write_chrome_trace(a.trace, r.timelines);
  JsonLine j = {{"model", e.name},
                {"device", r.device},
                {"threads", r.threads},
                {"precision", precision_name(e.precision)},
                {"batch", r.batch},
                {"steps", a.o.steps},
                {"images_per_sec", json_rounded(r.images_per_second, 2)},
                {"ms_per_step", json_rounded(r.ms_per_step, 2)},
                {"gflops_per_sec", json_rounded(r.gflops_per_second, 1)},
                {"allreduce_ms_per_step", json_rounded(r.parts.allreduce_ms, 2)},
                {"allreduce_hidden", json_rounded(r.hidden_fraction, 3)},
                {"allocations_per_step", r.allocations_per_step},
                {"host_syncs_per_step", r.host_syncs_per_step},
                {"cpu_cores", json_rounded(r.cpu_cores, 3)},
                {"peak_rss_mb", json_rounded(peak_rss_mb, 1)},
                {"step_graph", r.step_graph}};
  if (r.peak_device_mb > 0) j["peak_device_mb"] = json_rounded(r.peak_device_mb, 1);
  if (r.ceiling_gflops > 0) {
    j["ceiling_gflops"] = json_rounded(r.ceiling_gflops, 1);
    j["ceiling_fraction"] = json_rounded(r.gflops_per_second / r.ceiling_gflops, 3);
    j["gemm_ceiling_gflops"] = json_rounded(r.gemm_ceiling_gflops, 1);
    j["ceiling_cached"] = r.ceiling_cached;
  }
  if (r.accumulate > 1) {
    j["accumulate"] = r.accumulate;
    j["gradient_allreduces_per_step"] = json_rounded(r.gradient_allreduces_per_step, 3);
  }
  if (r.bubble >= 0) {
    j["microbatches"] = r.microbatches;
    j["bubble"] = json_rounded(r.bubble, 3);
  }
  add_parts(j, r);
  if (!r.timelines.empty()) j["timeline"] = timeline_json(r.timelines);
  fmt::print("{}\n", json_line(j));
  return kOk;
}

const RegisterCommand reg_bench({"bench", "Time training steps (images/s, ms/step, where a step's time goes, per-layer times)",
                           [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("config", a->config, "Experiment YAML file")->required();
  app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
  app.add_option("--steps", a->o.steps, "Timed steps (default 20)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a->o.warmup, "Untimed steps first (default 3)")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", a->threads, "CPU compute threads per replica")->check(CLI::PositiveNumber);
  CLI::Option* gpus = app.add_option("--gpus", a->gpus, "GPUs: a count, a list of ordinals (0,2 or 0,0), or all");
  app.add_option("--cpu", a->cpu, "CPU replicas")->check(CLI::PositiveNumber)->excludes(gpus);
  app.add_flag("--data", a->o.data,
               "Take batches from the config's training data (as trainer run does) and time the wait for them; "
               "default: one fixed synthetic batch");
  app.add_flag("--layers", a->o.layers, "Also time every layer's forward and backward");
  app.add_flag("--timeline", a->timeline,
               "Print each replica's last timed step: per gradient bucket, when it was ready and when its reduction "
               "started and ended, and how much of it this replica's thread did");
  app.add_option("--trace", a->trace,
                 "Write that timeline as a Chrome trace (chrome://tracing, Perfetto) to FILE (under mpirun: process 0's "
                 "replicas)");
  app.add_flag("--json", a->json, "Print only the machine-readable JSON line");
  return [a] { return run_bench(*a); };
}});

}  // namespace
}  // namespace trainer::cli
