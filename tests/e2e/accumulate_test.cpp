// Gradient accumulation through the CLI: stops and step checkpoints fall between optimizer steps, so an interrupted and resumed run ends where an uninterrupted one does; loss scaling skips whole steps; bench counts one all-reduce per step, for every strategy; a pipeline accumulates too; k micro-batches train as one batch of k times the samples.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "cli.h"
#include "small_cnn.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using e2e::SmallCnn;

// 10 micro-batches of 32 per epoch (320 samples), accumulate 4: optimizer steps of 4, 4 and 2
// micro-batches (the last one short); BN-free.
const std::string kConfig = [] {
  SmallCnn c;
  c.name = "acc";
  c.train = "{epochs: 3, batch_size: 32, accumulate: 4}";
  c.schedule = "{type: cosine, per_step: true}";
  c.extra = "checkpoint: {every_steps: 3, keep: 100}\n";
  return c.yaml();
}();

}  // namespace

TEST_CASE("e2e accumulate: a stop mid-step waits for the step's last micro-batch, and --resume ends as the uninterrupted run") {
  std::string dir = e2e::temp_dir("accumulate");
  e2e::write_file(dir + "/c.yaml", kConfig);
  auto full = e2e::trainer("run c.yaml --run-dir full", dir);
  INFO(full.out << full.err);
  REQUIRE(full.code == 0);
  CHECK_THAT(full.out, Contains("gradients accumulated over 4 micro-batches: 128 samples per optimizer step, 3 optimizer steps/epoch"));
  // every_steps 3 falls due at micro-batches 3, 6, 9, ... (global); each checkpoint waits for the
  // end of its optimizer step (micro-batch 4 or 8 of the epoch), or is the epoch's own.
  std::set<std::string> names;
  for (const auto& f : fs::directory_iterator(dir + "/full/checkpoints"))
    if (f.path().extension() == ".safetensors") names.insert(f.path().filename().string());
  const std::set<std::string> want{"epoch-0001-step-000004.safetensors", "epoch-0001-step-000008.safetensors", "epoch-0001.safetensors",
                                   "epoch-0002-step-000004.safetensors", "epoch-0002-step-000008.safetensors", "epoch-0002.safetensors",
                                   "epoch-0003-step-000004.safetensors", "epoch-0003-step-000008.safetensors", "epoch-0003.safetensors"};
  CHECK(names == want);
  // SIGINT before micro-batch 11 (epoch 2's second, in its first optimizer step, 0..3): the step
  // finishes, and the run stops after its fourth micro-batch.
  auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=11");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  CHECK_THAT(cut.out, Contains("Interrupted (SIGINT) at epoch 2 step 4/10: checkpoint"));
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
  CHECK(e2e::read_file(dir + "/full/checkpoints/epoch-0003.safetensors") ==
        e2e::read_file(dir + "/resumed/checkpoints/epoch-0003.safetensors"));
  // 3 epochs of 3 optimizer steps.
  CHECK_THAT(e2e::read_file(dir + "/full/checkpoints/epoch-0003.json"), Contains("\"optimizer_steps\": 9"));
}

TEST_CASE("e2e accumulate: an inf in one micro-batch skips the whole optimizer step, and two replicas decide alike") {
  std::string dir = e2e::temp_dir("accumulate_skip");
  e2e::write_file(dir + "/c.yaml", kConfig);
  // Micro-batch 2 is in the first step (0..3), 14 in the second of epoch 2 (14..17 is 4..7 of it).
  const std::string env = "TRAINER_INJECT_NONFINITE=2,14";
  auto r = e2e::trainer("run c.yaml --run-dir one --set train.loss_scale=dynamic", dir, env);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("1 of 10 steps skipped this epoch"));
  CHECK_THAT(e2e::read_file(dir + "/one/checkpoints/epoch-0003.json"), Contains("\"optimizer_steps\": 7"));
  auto two = e2e::trainer("run c.yaml --run-dir two --cpu 2 --set train.batch_size=16 --set train.loss_scale=dynamic", dir, env);
  INFO(two.out << two.err);
  REQUIRE(two.code == 0);
  CHECK_THAT(e2e::read_file(dir + "/two/checkpoints/epoch-0003.json"), Contains("\"optimizer_steps\": 7"));
}

namespace {

// `trainer bench <config> <args> --json` on a shipped config; its JSON line.
nlohmann::json bench_json(const std::string& config, const std::string& args) {
  auto r = e2e::trainer("bench '" TRAINER_SOURCE_DIR "/configs/" + config + "' " + args + " --json");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return e2e::last_json(r.out);
}

}  // namespace

TEST_CASE("e2e accumulate: bench times whole optimizer steps with one gradient all-reduce each, for every strategy") {
  nlohmann::json j = bench_json("smoke.yaml", "--cpu 2 --steps 3 --warmup 1 --set train.accumulate=3");
  CHECK(j["accumulate"] == 3);
  CHECK(j["gradient_allreduces_per_step"] == 1.0);
  CHECK(j["batch"] == 3 * 64);  // samples per optimizer step
  // A pipeline: one copy, nothing all-reduced; hybrid: each stage's sum over the copies once a step.
  j = bench_json("model_parallel.yaml", "--steps 2 --warmup 1 --set train.accumulate=2 --set train.batch_size=16");
  CHECK(j["accumulate"] == 2);
  CHECK(j["batch"] == 2 * 16);
  CHECK(j["gradient_allreduces_per_step"] == 0.0);
  j = bench_json("hybrid.yaml", "--steps 2 --warmup 1 --set train.accumulate=2 --set train.batch_size=8");
  CHECK(j["accumulate"] == 2);
  CHECK(j["batch"] == 2 * 2 * 8);  // 2 copies x 2 micro-batches of 8
  CHECK(j["gradient_allreduces_per_step"] == 1.0);
}

TEST_CASE("e2e accumulate: a pipeline (device parallel) accumulates micro-batches into optimizer steps") {
  std::string dir = e2e::temp_dir("accumulate_pipeline");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/model_parallel.yaml' --run-dir mp --set train.epochs=1 "
                        "--set train.steps_per_epoch=6 --set train.batch_size=16 --set train.accumulate=2 --set data.val.size=64",
                        dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("gradients accumulated over 2 micro-batches: 32 samples per optimizer step, 3 optimizer steps/epoch"));
  CHECK_THAT(e2e::read_file(dir + "/mp/checkpoints/epoch-0001.json"), Contains("\"optimizer_steps\": 3"));
}

namespace {

// metrics.csv's rows as column -> values (one per epoch).
std::map<std::string, std::vector<double>> metric_columns(const std::string& run_dir) {
  std::stringstream ss(e2e::read_file(run_dir + "/metrics.csv"));
  std::string header, line;
  std::getline(ss, header);
  std::vector<std::string> keys;
  std::stringstream h(header);
  for (std::string k; std::getline(h, k, ',');) keys.push_back(k);
  std::map<std::string, std::vector<double>> cols;
  while (std::getline(ss, line)) {
    std::stringstream v(line);
    size_t i = 0;
    for (std::string x; std::getline(v, x, ',') && i < keys.size(); ++i) cols[keys[i]].push_back(x.empty() ? NAN : std::stod(x));
  }
  return cols;
}

}  // namespace

TEST_CASE("e2e accumulate: k micro-batches train as one batch of k times the samples (SGD, a short last step, 1 and 2 replicas)") {
  // SGD's update is proportional to the gradient (Adam's nearly is not): a gradient k times too
  // large — each micro-batch divided by its own samples instead of the optimizer step's — shows.
  // 320 samples: optimizer steps of 128, 128 and 64 samples in each run; BN-free, no dropout, so
  // only the order of the sums differs.
  std::string dir = e2e::temp_dir("accumulate_equiv");
  SmallCnn c;
  c.name = "acceq";
  c.train = "{epochs: 3, batch_size: 128}";
  c.optimizer = "{type: sgd, lr: 0.2, momentum: 0.9}";
  e2e::write_file(dir + "/c.yaml", c.yaml());
  auto one = e2e::trainer("run c.yaml --run-dir one", dir);
  INFO(one.out << one.err);
  REQUIRE(one.code == 0);
  auto acc = e2e::trainer("run c.yaml --run-dir acc --set train.batch_size=32 --set train.accumulate=4", dir);
  INFO(acc.out << acc.err);
  REQUIRE(acc.code == 0);
  CHECK_THAT(acc.out, Contains("128 samples per optimizer step, 3 optimizer steps/epoch"));
  auto two = e2e::trainer("run c.yaml --run-dir two --cpu 2 --set train.batch_size=16 --set train.accumulate=4", dir);
  INFO(two.out << two.err);
  REQUIRE(two.code == 0);
  const auto want = metric_columns(dir + "/one");
  REQUIRE(want.at("loss").size() == 3);
  // The weights must move (else equal columns prove nothing): the loss changes by far more than
  // the bound below over 3 epochs of SGD at this rate (1.57 to 1.44 here).
  CHECK(std::abs(want.at("loss").back() - want.at("loss").front()) > 0.03 * want.at("loss").front());
  for (const char* run : {"acc", "two"}) {
    const auto got = metric_columns(dir + "/" + run);
    INFO(run);
    REQUIRE(got.at("loss").size() == 3);
    for (size_t e = 0; e < 3; ++e) {
      INFO("epoch " << e << ": " << got.at("loss")[e] << " vs " << want.at("loss")[e]);
      // Rounding of differently ordered float sums, carried through 9 steps: ~1e-6 relative.
      CHECK(std::abs(got.at("loss")[e] - want.at("loss")[e]) <= 1e-4 * want.at("loss")[e]);
      CHECK(got.at("accuracy")[e] == want.at("accuracy")[e]);
    }
  }
}
