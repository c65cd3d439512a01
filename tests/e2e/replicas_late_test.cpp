// Two replicas whose steps run as one program (TRAINER_TEST_FIXED_STEP: NCCL's form, on the CPU; =buckets,
// the gradient summed bucket by bucket during backward) read every rank's statistics late, gathered by
// the program: what a run reports and writes is unchanged.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "small_cnn.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

std::vector<std::string> checkpoints(const std::string& run_dir) {
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(run_dir + "/checkpoints"))
    if (f.path().extension() == ".safetensors") names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// metrics.csv and every checkpoint of run `b` byte for byte those of run `a`.
void check_same_runs(const std::string& dir, const std::string& a, const std::string& b) {
  INFO(a << " against " << b);
  CHECK(e2e::read_file(dir + "/" + a + "/metrics.csv") == e2e::read_file(dir + "/" + b + "/metrics.csv"));
  const std::vector<std::string> names = checkpoints(dir + "/" + a);
  CHECK(!names.empty());
  CHECK(names == checkpoints(dir + "/" + b));
  for (const std::string& f : names) {
    INFO(f);
    const std::string x = e2e::read_file(dir + "/" + a + "/checkpoints/" + f);
    CHECK(!x.empty());
    CHECK(x == e2e::read_file(dir + "/" + b + "/checkpoints/" + f));
  }
}

}  // namespace

TEST_CASE("e2e replicas: two replicas as one program each read every rank's statistics late, and report and write what "
          "the ordinary step does (checkpoints, loss scaling, accumulation, sync_bn, a stop, terminate_on_nan)") {
  e2e::SmallCnn c;
  c.name = "late2";
  c.conv2 = c.val = true;
  c.train = "{epochs: 3, batch_size: 16, watchdog_s: 30}";  // per replica: a global batch of 32; a hang fails in 30 s
  c.optimizer = "{type: adam, lr: 0.003}";
  c.extra = "checkpoint: {every_steps: 4, keep: 100}\n";
  const std::string dir = e2e::temp_dir("replicas_late");
  e2e::write_file(dir + "/c.yaml", c.yaml());
  const std::string fixed = "TRAINER_TEST_FIXED_STEP=1";
  auto run = [&](const std::string& name, const std::string& args, const std::string& env, int code = 0) {
    auto r = e2e::trainer("run c.yaml --cpu 2 --run-dir " + name + args, dir, env);
    INFO(name << ": " << r.out << r.err);
    CHECK(r.code == code);
    return r;
  };
  // The loop's own lag (two steps, read when two more are launched) and three.
  run("now", "", "");
  run("late", "", fixed);
  run("late3", "", fixed + " TRAINER_TEST_STATS_LAG=3");
  check_same_runs(dir, "now", "late");
  check_same_runs(dir, "now", "late3");
  // The program's gradient summed bucket by bucket as backward finishes each (NCCL's form, summed
  // as called here; buckets of 262 floats and up: several), against the ordinary step's buckets.
  const std::string small = " --set train.bucket_mb=0.001";
  const std::string buckets = "TRAINER_TEST_FIXED_STEP=buckets";
  run("now-b", small, "");
  run("late-b", small, buckets);
  check_same_runs(dir, "now-b", "late-b");
  // Loss scaling with skipped steps and clipping, accumulation 3: an inf asked for at global
  // micro-batches 2, 7, 8 and 15 runs that one the ordinary way (its step's statistics then
  // exchanged on the host at once), every other as programs read late.
  const std::string scaled = " --set 'train.loss_scale={init_scale: 1024, growth_interval: 3}' --set train.clip_norm=0.5";
  for (const std::string& accumulate : {std::string(), std::string(" --set train.accumulate=3")}) {
    const std::string tag = accumulate.empty() ? "scaled" : "accum";
    run(tag, scaled + accumulate, "TRAINER_INJECT_NONFINITE=2,7,8,15");
    run(tag + "-late", scaled + accumulate, fixed + " TRAINER_INJECT_NONFINITE=2,7,8,15");
    check_same_runs(dir, tag, tag + "-late");
    run(tag + "-b", scaled + accumulate + small, "TRAINER_INJECT_NONFINITE=2,7,8,15");
    run(tag + "-late-b", scaled + accumulate + small, buckets + " TRAINER_INJECT_NONFINITE=2,7,8,15");
    check_same_runs(dir, tag + "-b", tag + "-late-b");
  }
  CHECK_THAT(e2e::read_file(dir + "/scaled/metrics.csv"), Contains("skipped_steps"));
  // sync_bn: each batch norm's statistics summed over both replicas inside the program too.
  e2e::SmallCnn bn = c;
  bn.batchnorm = true;
  e2e::write_file(dir + "/c.yaml", bn.yaml());
  run("sbn", " --set train.sync_bn=true", "");
  run("sbn-late", " --set train.sync_bn=true", fixed);
  check_same_runs(dir, "sbn", "sbn-late");
  run("own-bn", "", "");  // the replicas' own statistics: other weights
  CHECK(e2e::read_file(dir + "/own-bn/metrics.csv") != e2e::read_file(dir + "/sbn/metrics.csv"));
  e2e::write_file(dir + "/c.yaml", c.yaml());
  // A stop asked for on rank 0 at global step 14: both replicas agree on it as the step starts, so
  // the interrupt's checkpoint is the same step's on both paths.
  const auto cut_now = run("cut", "", "TRAINER_TEST_SIGINT_AT_STEP=14", 130);
  const auto cut_late = run("cut-late", "", fixed + " TRAINER_TEST_SIGINT_AT_STEP=14", 130);
  CHECK_THAT(cut_late.out, Contains("Interrupted (SIGINT) at epoch 2 step 5/10"));
  check_same_runs(dir, "cut", "cut-late");
  // terminate_on_nan: every replica reads the non-finite loss after the same steps (the loop reads
  // several ranks' steps at fixed points), so both stop there and name the same batch.
  std::vector<std::string> said;
  for (const std::string& env : {std::string(), fixed}) {
    const auto nan = run("nan" + std::to_string(said.size()),
                         " --set optimizer.type=sgd --set optimizer.lr=1e5 --set callbacks.terminate_on_nan=true", env);
    const size_t at = nan.out.find("Batch ");
    REQUIRE(at != std::string::npos);
    said.push_back(nan.out.substr(at, nan.out.find('\n', at) - at));
  }
  CHECK(said[0] == said[1]);
}
