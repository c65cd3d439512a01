// End-to-end device parallelism on virtual CPU devices: the shared-LSTM model learns its pair
// task, a pipelined CNN resumes bit-identically after SIGINT, summary shows devices and memory,
// bench reports the bubble, and eval reads a device-parallel run on one device.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <sstream>

#include "cli.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

bool same_file(const std::string& a, const std::string& b) { return e2e::read_file(a) == e2e::read_file(b); }

const std::string kSharedLstm = "'" TRAINER_SOURCE_DIR "/configs/shared_lstm.yaml'";
const std::string kModelParallel = "'" TRAINER_SOURCE_DIR "/configs/model_parallel.yaml'";

}  // namespace

TEST_CASE("e2e device parallel: configs/shared_lstm.yaml learns whether two sequences share a source") {
  // The config's model and task at (40, 32) sequences instead of (140, 256), so CI's 2 cores
  // train it in seconds: same layers, devices, micro-batches and optimizer.
  std::string dir = e2e::temp_dir("shared_lstm");
  std::string small =
      " --set 'model.inputs=[{name: seq_a, shape: [40, 32]}, {name: seq_b, shape: [40, 32]}]'"
      " --set data.train.length=40 --set data.train.features=32 --set data.train.size=1024"
      " --set data.val.length=40 --set data.val.features=32 --set data.val.size=256 --set train.epochs=4 --set optimizer.lr=0.003";
  auto r = e2e::trainer("run " + kSharedLstm + small + " --run-dir run", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("device parallel over 3 devices: gpu:0") && Contains("2 micro-batches (GPipe)"));
  CHECK_THAT(r.out, Contains("gpu:0 runs on a virtual CPU device"));
  auto m = e2e::last_metrics(dir + "/run");
  WARN("shared_lstm.yaml at (40, 32) on 3 virtual CPU devices, 4 epochs: val_accuracy " << m["val_accuracy"]
                                                                                       << ", val_loss " << m["val_loss"]);
  CHECK(m["val_accuracy"] >= 0.9);

  // The run's checkpoint holds one LSTM (the shared one), read back on one device by eval.
  auto ev = e2e::trainer("eval run", dir);
  INFO(ev.out << ev.err);
  REQUIRE(ev.code == 0);
  CHECK_THAT(ev.out, Contains("accuracy"));
}

TEST_CASE("e2e device parallel: summary shows each layer's device and the memory per device") {
  auto r = e2e::trainer("summary " + kSharedLstm);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("Device") && Contains("seq_a (InputLayer)") && Contains("(shares lstm_a)"));
  CHECK_THAT(r.out, Contains("Memory per device") && Contains("  gpu:0 ") && Contains("  gpu:1 ") && Contains("  cpu "));
  // LSTM(64) on 256 features: 4 * 64 * (256 + 64 + 1) = 82,176 parameters, held once per device.
  CHECK_THAT(r.out, Contains("gpu:0    params       82,176"));
  CHECK_THAT(r.out, Contains("gpu:1    params       82,176"));
}

TEST_CASE("e2e device parallel: SIGINT mid-epoch, then --resume, ends bit-identical (pipelined CNN)") {
  std::string dir = e2e::temp_dir("mp_resume");
  std::string small = " --set data.train.size=256 --set data.val.size=64 --set train.epochs=2 --set train.batch_size=32";
  auto full = e2e::trainer("run " + kModelParallel + small + " --run-dir full", dir);
  INFO(full.out << full.err);
  REQUIRE(full.code == 0);
  auto cut = e2e::trainer("run " + kModelParallel + small + " --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=11");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK_THAT(res.out, Contains("epoch 2, step 4/8"));
  CHECK(same_file(dir + "/full/checkpoints/epoch-0002.safetensors", dir + "/resumed/checkpoints/epoch-0002.safetensors"));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
}

TEST_CASE("e2e device parallel: the stages' programs (TRAINER_TEST_FIXED_STEP=1, as a GPU records them) give the "
          "ordinary run's bits, a short last batch, accumulation, clipping and loss scaling included, and SIGINT then "
          "--resume under them") {
  std::string dir = e2e::temp_dir("mp_program");
  // 250 samples in batches of 32: seven full batches and one of 26 (another program's shape).
  const std::string small = " --set data.train.size=250 --set data.val.size=64 --set train.epochs=2 --set train.batch_size=32";
  // The third: clipping and loss scaling decided inside the programs from every stage's measure.
  for (const std::string& extra : {std::string(""), std::string(" --set train.accumulate=3"),
                                   std::string(" --set train.clip_norm=0.5 --set train.loss_scale=dynamic")}) {
    INFO(extra);
    const std::string tag = extra.empty() ? "plain" : extra.find("accumulate") != std::string::npos ? "acc" : "clip";
    auto ordinary = e2e::trainer("run " + kModelParallel + small + extra + " --run-dir o-" + tag, dir);
    INFO(ordinary.out << ordinary.err);
    REQUIRE(ordinary.code == 0);
    auto program = e2e::trainer("run " + kModelParallel + small + extra + " --run-dir p-" + tag, dir, "TRAINER_TEST_FIXED_STEP=1");
    INFO(program.out << program.err);
    REQUIRE(program.code == 0);
    CHECK(e2e::read_file(dir + "/o-" + tag + "/metrics.csv") == e2e::read_file(dir + "/p-" + tag + "/metrics.csv"));
    CHECK(same_file(dir + "/o-" + tag + "/checkpoints/epoch-0002.safetensors", dir + "/p-" + tag + "/checkpoints/epoch-0002.safetensors"));
  }
  auto cut = e2e::trainer("run " + kModelParallel + small + " --run-dir cut", dir,
                          "TRAINER_TEST_FIXED_STEP=1 TRAINER_TEST_SIGINT_AT_STEP=11");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir, "TRAINER_TEST_FIXED_STEP=1");
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(same_file(dir + "/o-plain/checkpoints/epoch-0002.safetensors", dir + "/resumed/checkpoints/epoch-0002.safetensors"));
}

TEST_CASE("e2e hybrid: configs/hybrid.yaml trains 2 copies x 2 stages, and SIGINT mid-epoch then --resume ends bit-identical, "
          "the stages' programs (TRAINER_TEST_FIXED_STEP=1, as GPUs record them) too") {
  const std::string hybrid = "'" TRAINER_SOURCE_DIR "/configs/hybrid.yaml'";
  std::string dir = e2e::temp_dir("hybrid");
  const std::string small = " --set data.train.size=256 --set data.val.size=64 --set train.epochs=2";
  auto full = e2e::trainer("run " + hybrid + small + " --run-dir full", dir);
  INFO(full.out << full.err);
  REQUIRE(full.code == 0);
  CHECK_THAT(full.out, Contains("Devices: hybrid, 2 copies x 2 stages (data parallel over pipelines): copy 0: cpu:0 -> cpu:0 (3 layers), "
                                "cpu:1 -> cpu:1 (5 layers); copy 1: cpu:0 -> cpu:2 (3 layers), cpu:1 -> cpu:3 (5 layers)"));
  CHECK_THAT(full.out, Contains("batch 32 per copy, global batch 64, 2 micro-batches (GPipe), 4 steps/epoch"));
  auto cut = e2e::trainer("run " + hybrid + small + " --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=6");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  CHECK_THAT(cut.out, Contains("Interrupted (SIGINT) at epoch 2 step 3/4"));
  // Resumed with the steps as the stages' programs (each stage's sum over the copies inside).
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir, "TRAINER_TEST_FIXED_STEP=1");
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(same_file(dir + "/full/checkpoints/epoch-0002.safetensors", dir + "/resumed/checkpoints/epoch-0002.safetensors"));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
  auto program = e2e::trainer("run " + hybrid + small + " --run-dir program", dir, "TRAINER_TEST_FIXED_STEP=1");
  INFO(program.out << program.err);
  REQUIRE(program.code == 0);
  CHECK(same_file(dir + "/full/checkpoints/epoch-0002.safetensors", dir + "/program/checkpoints/epoch-0002.safetensors"));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/program/metrics.csv"));
  auto b = e2e::trainer("bench " + hybrid + " --steps 2 --warmup 1 --json");
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  const nlohmann::json j = e2e::last_json(b.out);
  CHECK(j["device"] == "hybrid 2 copies x 2 stages");
  CHECK(j["batch"] == 64);
  auto s = e2e::trainer("summary " + hybrid);
  INFO(s.out << s.err);
  REQUIRE(s.code == 0);
  CHECK_THAT(s.out, Contains("Hybrid: 2 copies x 2 stages on 4 devices"));
}

TEST_CASE("e2e device parallel: bench reports throughput and the pipeline bubble") {
  auto r = e2e::trainer("bench " + kModelParallel + " --steps 2 --warmup 1 --set pipeline.microbatches=2");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = e2e::last_json(r.out);
  CHECK(j["device"] == "device parallel cpu:0+cpu:1");
  CHECK(j["microbatches"] == 2);
  CHECK(j.contains("bubble"));
}

TEST_CASE("e2e device parallel: hybrid device counts, CPU replicas of a pipeline and bad placements are errors with their place") {
  std::string dir = e2e::temp_dir("dp_errors");
  auto h = e2e::trainer("run " + kModelParallel + " --set strategy=hybrid --cpu 3 --run-dir h", dir);
  CHECK(h.code == 4);
  CHECK_THAT(h.err, Contains("strategy hybrid places 2 stages per copy: it needs a multiple of 2 devices, at least 4"));
  auto c = e2e::trainer("run " + kModelParallel + " --cpu 2 --run-dir c", dir);
  CHECK(c.code == 2);
  CHECK_THAT(c.err, Contains("several CPU replicas of a device-parallel model are the hybrid strategy"));
  auto p = e2e::trainer("run " + kModelParallel + " --set placement.b1=gpu:7 --gpus 0 --run-dir x", dir);
  CHECK(p.code == 4);  // no GPU here, or only one: a device error either way
}
