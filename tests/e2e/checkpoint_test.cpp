// Runs that survive: SIGINT mid-epoch then resume is bit-identical to an uninterrupted run, a
// kill -9 during a checkpoint write resumes from the previous one, resume across replica
// counts, checkpoints read by an independent reader, keep/best, eval and init.from.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "cli.h"
#include "small_cnn.h"
#include "core/io/safetensors.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using e2e::SmallCnn;

// Small enough for seconds per run; BN-free, so replica counts give the same gradients.
const std::string kConfig = [] {
  SmallCnn c;
  c.name = "ckpt";
  c.conv2 = c.val = c.flip = true;
  c.optimizer = "{type: adam, lr: 0.003}";
  c.schedule = "{type: cosine}";
  return c.yaml();
}();

std::string setup(const std::string& tag, const std::string& extra = "") {
  std::string dir = e2e::temp_dir(tag);
  e2e::write_file(dir + "/c.yaml", std::string(kConfig) + extra);
  return dir;
}

bool same_file(const std::string& a, const std::string& b) {
  std::string x = e2e::read_file(a), y = e2e::read_file(b);
  return !x.empty() && x == y;
}

// Relative L2 distance between two checkpoints' weights (every parameter, no optimizer state).
double weight_distance(const std::string& a, const std::string& b) {
  trainer::SafeTensorsReader ra(a), rb(b);
  double diff = 0, norm = 0;
  for (const trainer::SafeTensor& t : ra.tensors()) {
    if (t.name.rfind("optimizer/", 0) == 0 || t.name.rfind("data/", 0) == 0) continue;
    std::vector<float> x = ra.f32(t.name), y = rb.f32(t.name);
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      norm += double(x[i]) * x[i];
    }
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

}  // namespace

TEST_CASE("e2e checkpoint: SIGINT mid-epoch, then --resume, ends bit-identical to an uninterrupted run") {
  std::string dir = setup("sigint");
  auto full = e2e::trainer("run c.yaml --run-dir full", dir);
  REQUIRE(full.code == 0);
  // Global step 14 is in epoch 2 (10 steps each): the signal goes through the real handler.
  auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=14");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  CHECK_THAT(cut.out, Contains("Interrupted (SIGINT) at epoch 2 step 5/10"));
  REQUIRE(fs::exists(dir + "/cut/checkpoints/epoch-0002-step-000005.safetensors"));
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK_THAT(res.out, Contains("Resuming from cut/checkpoints/epoch-0002-step-000005.safetensors: epoch 2, step 5/10"));
  CHECK(same_file(dir + "/full/checkpoints/epoch-0003.safetensors", dir + "/resumed/checkpoints/epoch-0003.safetensors"));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
}

TEST_CASE("e2e checkpoint: a real SIGINT from outside exits 130 with a checkpoint, resume ends identical") {
  std::string dir = setup("sigint2");
  // The signal is sent once the first epoch is in metrics.csv, so it lands somewhere in a later
  // epoch, unless a slow moment lets the whole run end first: then again with a run 4 times as
  // long. The uninterrupted run to compare with has the length that was interrupted.
  int epochs = 0;
  std::string cut, out;
  for (int n : {30, 120, 480}) {
    cut = "cut" + std::to_string(n);
    std::string cmd = "cd '" + dir + "' && ('" TRAINER_BINARY "' run c.yaml --run-dir " + cut + " --set train.epochs=" +
                      std::to_string(n) + " >" + cut + ".out 2>&1 & pid=$!; for i in $(seq 600); do [ \"$(wc -l 2>/dev/null <" + cut +
                      "/metrics.csv)\" -ge 2 ] 2>/dev/null && break; sleep 0.05; done; "
                      "kill -INT $pid; wait $pid; echo $? >" + cut + ".rc)";
    REQUIRE(std::system(cmd.c_str()) == 0);
    out = e2e::read_file(dir + "/" + cut + ".out");
    if (e2e::read_file(dir + "/" + cut + ".rc").rfind("0", 0) != 0) {
      epochs = n;
      break;
    }
    WARN("a run of " << n << " epochs finished before SIGINT arrived: again with a longer one");
  }
  INFO(out);
  if (epochs == 0) FAIL("every run (30, 120 and 480 epochs) finished before SIGINT arrived: nothing was interrupted");
  REQUIRE(e2e::read_file(dir + "/" + cut + ".rc").rfind("130", 0) == 0);
  CHECK_THAT(out, Contains("Interrupted "));
  auto full = e2e::trainer("run c.yaml --run-dir full --set train.epochs=" + std::to_string(epochs), dir);
  REQUIRE(full.code == 0);
  auto res = e2e::trainer("run --resume " + cut + " --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  char last[64];
  std::snprintf(last, sizeof last, "/checkpoints/epoch-%04d.safetensors", epochs);
  CHECK(same_file(dir + "/full" + last, dir + "/resumed" + last));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
}

TEST_CASE("e2e checkpoint: kill -9 during a checkpoint write leaves the previous one, --resume auto continues from it") {
  std::string dir = setup("kill9");
  auto full = e2e::trainer("run c.yaml --run-dir full", dir);
  REQUIRE(full.code == 0);
  // The hook stops the write of epoch-0002's weights half-way; the test kills the process there.
  std::string cmd = "cd '" + dir + "' && (TRAINER_TEST_STALL_WRITE=epoch-0002.safetensors '" TRAINER_BINARY
                    "' run c.yaml --runs-root runs >k.out 2>k.err & pid=$!; "
                    "for i in $(seq 600); do grep -q 'stalling write' k.err && break; sleep 0.1; done; "
                    "kill -9 $pid; wait $pid; echo $? >k.rc)";
  REQUIRE(std::system(cmd.c_str()) == 0);
  INFO(e2e::read_file(dir + "/k.err"));
  REQUIRE(e2e::read_file(dir + "/k.rc").rfind("137", 0) == 0);
  auto res = e2e::trainer("run c.yaml --resume auto --runs-root runs --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK_THAT(res.out, Contains("checkpoints/epoch-0001.safetensors: epoch 2, step 0/10"));
  CHECK(same_file(dir + "/full/checkpoints/epoch-0003.safetensors", dir + "/resumed/checkpoints/epoch-0003.safetensors"));
}

TEST_CASE("e2e checkpoint: resume a 2-replica run on 1 replica and a 1-replica run on 2") {
  std::string dir = setup("replicas");
  REQUIRE(e2e::trainer("run c.yaml --cpu 2 --run-dir two --set train.batch_size=16 --set checkpoint.keep=3", dir).code == 0);
  REQUIRE(e2e::trainer("run c.yaml --cpu 1 --run-dir one --set checkpoint.keep=3", dir).code == 0);
  // Both have a global batch of 32; resume each from epoch 1 on the other replica count.
  auto a = e2e::trainer("run --resume two/checkpoints/epoch-0001.json --cpu 1 --run-dir two_on_one", dir);
  INFO(a.out << a.err);
  REQUIRE(a.code == 0);
  CHECK_THAT(a.out, Contains("global batch of 32 on 2 replicas, now 32 per replica"));
  auto b = e2e::trainer("run --resume one/checkpoints/epoch-0001.safetensors --cpu 2 --run-dir one_on_two", dir);
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  CHECK_THAT(b.out, Contains("global batch of 32 on 1 replicas, now 16 per replica"));
  double d1 = weight_distance(dir + "/two/checkpoints/epoch-0003.safetensors", dir + "/two_on_one/checkpoints/epoch-0003.safetensors");
  double d2 = weight_distance(dir + "/one/checkpoints/epoch-0003.safetensors", dir + "/one_on_two/checkpoints/epoch-0003.safetensors");
  WARN("resume across replica counts: relative L2 weight difference after 2 more epochs: 2->1 " << d1 << ", 1->2 " << d2);
  CHECK(d1 < 1e-5);
  CHECK(d2 < 1e-5);
  // An odd global batch cannot be split.
  auto odd = e2e::trainer("run --resume two --cpu 3 --run-dir odd", dir);
  CHECK(odd.code == 2);
  CHECK_THAT(odd.err, Contains("global batch of 32 cannot be split over 3 replicas"));
}

TEST_CASE("e2e checkpoint: an independent reader (Python, numpy) reads the tensors trainer wrote") {
  if (e2e::skip_without_python({{"numpy", "python3-numpy"}})) return;
  std::string dir = setup("pyread");
  REQUIRE(e2e::trainer("run c.yaml --run-dir r --set train.epochs=1", dir).code == 0);
  std::string file = dir + "/r/checkpoints/epoch-0001.safetensors";
  std::string cmd = e2e::python() + " '" TRAINER_SOURCE_DIR "/tests/e2e/read_safetensors.py' '" + file + "' >'" + dir + "/py.txt'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::istringstream py(e2e::read_file(dir + "/py.txt"));
  trainer::SafeTensorsReader ours(file);
  std::string line;
  std::getline(py, line);
  CHECK_THAT(line, Contains("\"format\": \"trainer-checkpoint\""));
  size_t seen = 0;
  while (std::getline(py, line)) {
    std::istringstream f(line);
    std::string name, dtype, shape;
    double sum = 0, first = 0;
    f >> name >> dtype >> shape >> sum >> first;
    const trainer::SafeTensor* t = ours.find(name);
    REQUIRE(t != nullptr);
    std::string want;
    for (int64_t d : t->shape) want += (want.empty() ? "" : "x") + std::to_string(d);
    CHECK(shape == want);
    std::vector<float> v = ours.f32(name);
    double s = 0;
    for (float x : v) s += x;
    CHECK(std::abs(s - sum) <= 1e-9 * std::max(1.0, std::abs(s)));
    CHECK(float(first) == v[0]);
    ++seen;
  }
  CHECK(seen == ours.tensors().size());
  for (const char* n : {"conv1/kernel", "conv1/bias", "dense/kernel", "optimizer/m/conv1/kernel", "optimizer/v/dense/bias", "data/mean", "data/std"})
    CHECK(ours.find(n) != nullptr);
  WARN("independent safetensors reader (python3 + numpy): " << seen << " tensors, names, shapes and values match");
}

TEST_CASE("e2e checkpoint: keep the newest K and the best, callbacks stop and reduce the rate like Keras") {
  std::string dir = setup("keep", "checkpoint: {every: 1, keep: 2, best: val_accuracy}\n");
  auto r = e2e::trainer("run c.yaml --run-dir r --set train.epochs=4", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("Epoch 1: val_accuracy improved from -inf to"));
  for (const char* f : {"epoch-0003", "epoch-0004", "best"}) CHECK(fs::exists(dir + "/r/checkpoints/" + f + ".safetensors"));
  for (const char* f : {"epoch-0001", "epoch-0002"}) CHECK_FALSE(fs::exists(dir + "/r/checkpoints/" + f + ".json"));

  // min_delta larger than any change: no epoch after the first improves.
  std::string cb = "callbacks:\n  early_stopping: {monitor: loss, min_delta: 100, patience: 1}\n"
                   "  reduce_lr_on_plateau: {monitor: loss, min_delta: 100, patience: 1, factor: 0.5}\n";
  std::string d2 = e2e::temp_dir("callbacks");
  std::string constant = kConfig;
  constant.replace(constant.find("{type: cosine}"), 14, "{type: constant}");
  e2e::write_file(d2 + "/c.yaml", constant + cb);
  auto c = e2e::trainer("run c.yaml --run-dir r --set train.epochs=5", d2);
  INFO(c.out << c.err);
  REQUIRE(c.code == 0);
  CHECK_THAT(c.out, Contains("Epoch 2: ReduceLROnPlateau reducing learning rate to 0.0015.") && Contains("Epoch 2: early stopping"));
  CHECK_FALSE(fs::exists(d2 + "/r/checkpoints/epoch-0003.json"));  // stopped after epoch 2
  auto rows = e2e::read_file(d2 + "/r/metrics.csv");
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 3);  // header + 2 epochs

  auto nan = e2e::trainer("run c.yaml --run-dir n --json --set optimizer.type=sgd --set optimizer.lr=1e5 --set callbacks.terminate_on_nan=true", d2);
  INFO(nan.out << nan.err);
  CHECK(nan.code == 0);
  CHECK_THAT(nan.out, Contains(": Invalid loss, terminating training"));
  CHECK(e2e::last_json(nan.out)["stopped_by"] == "terminate_on_nan");
}

TEST_CASE("e2e checkpoint: trainer eval prints the run's validation accuracy and a confusion matrix") {
  std::string dir = setup("eval");
  REQUIRE(e2e::trainer("run c.yaml --run-dir r --json", dir).code == 0);
  std::string csv = e2e::read_file(dir + "/r/metrics.csv");
  auto e = e2e::trainer("eval r --json", dir);
  INFO(e.out << e.err);
  REQUIRE(e.code == 0);
  // The same pass training ran at its last epoch: the same accuracy (printed in full by both).
  std::vector<std::string> cells;  // the last row: epoch,accuracy,loss,lr,val_accuracy,val_loss
  std::istringstream last(csv.substr(csv.rfind('\n', csv.size() - 2) + 1));
  for (std::string c; std::getline(last, c, ',');) cells.push_back(c);
  REQUIRE(cells.size() == 6);
  std::string val_acc = cells[4];
  const nlohmann::json j = e2e::last_json(e.out);
  CHECK(j["accuracy"].get<double>() == std::stod(val_acc));
  CHECK(j["count"] == 64);
  auto m = e2e::trainer("eval r/checkpoints/epoch-0003.safetensors --confusion", dir);
  INFO(m.out << m.err);
  REQUIRE(m.code == 0);
  CHECK_THAT(m.out, Contains("64 samples - loss:") && Contains("Confusion matrix (rows: true class, columns: predicted class)"));
  auto t = e2e::trainer("eval r --split test", dir);
  CHECK(t.code == 2);
  CHECK_THAT(t.err, Contains("the config has no data.test"));
  auto d = e2e::trainer("eval r --split test --data '{type: synthetic, size: 40, image_size: 16, classes: 4, seed: 9}'", dir);
  INFO(d.out << d.err);
  CHECK(d.code == 0);
  CHECK_THAT(d.out, Contains("40 samples"));
}

TEST_CASE("e2e checkpoint: init.from loads weights by name and reports mismatches") {
  std::string dir = setup("init");
  REQUIRE(e2e::trainer("run c.yaml --run-dir base --set train.epochs=1", dir).code == 0);
  std::string from = " --set init.from=base/checkpoints/epoch-0001.safetensors";
  auto ok = e2e::trainer("run c.yaml --run-dir ft --set train.epochs=1" + from, dir);
  INFO(ok.out << ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Contains("Initialised 6 of 6 parameters from"));
  // Another head: the dense layer's shape differs.
  auto bad = e2e::trainer("run c.yaml --run-dir ft2 --set model.layers.6.units=7" + from, dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Contains("--set init.from=") && Contains("dense/kernel 16x4 in the file, 16x7 in the model"));
  auto skip = e2e::trainer("run c.yaml --run-dir ft3 --set train.epochs=1 --set model.layers.6.units=7 --set init.skip_mismatch=true" + from, dir);
  INFO(skip.out << skip.err);
  CHECK(skip.code == 0);
  CHECK_THAT(skip.out, Contains("Initialised 4 of 6 parameters") && Contains("skipped for their shape: dense/kernel"));
}

TEST_CASE("e2e checkpoint: a second SIGINT during the checkpoint write lets it finish, a third leaves at once with the previous checkpoint valid") {
  std::string dir = setup("sigint_twice");
  // The first SIGINT (hook, step 14) starts the interrupt checkpoint; its write stalls half-way
  // (2 s), and the test sends the second SIGINT then: the write finishes, the run exits 130 with it.
  auto run = [&](const std::string& tag, const std::string& stall_s, int signals) {
    std::string cmd = "cd '" + dir + "' && (TRAINER_TEST_SIGINT_AT_STEP=14 TRAINER_TEST_STALL_WRITE=step-000005.safetensors "
                      "TRAINER_TEST_STALL_SECONDS=" + stall_s + " '" TRAINER_BINARY "' run c.yaml --runs-root " + tag +
                      " >" + tag + ".out 2>" + tag + ".err & pid=$!; "
                      "for i in $(seq 600); do grep -q 'stalling write' " + tag + ".err && break; sleep 0.1; done; "
                      "start=$(date +%s%N); for k in $(seq " + std::to_string(signals) + "); do kill -INT $pid; sleep 0.2; done; "
                      "wait $pid; echo $? >" + tag + ".rc; echo $(( ($(date +%s%N) - start) / 1000000 )) >" + tag + ".ms)";
    REQUIRE(std::system(cmd.c_str()) == 0);
    INFO(e2e::read_file(dir + "/" + tag + ".out") << e2e::read_file(dir + "/" + tag + ".err"));
    CHECK(e2e::read_file(dir + "/" + tag + ".rc").rfind("130", 0) == 0);
    return std::stol(e2e::read_file(dir + "/" + tag + ".ms"));
  };
  run("two", "2", 1);
  CHECK_THAT(e2e::read_file(dir + "/two.err"), Contains("trainer: finishing the checkpoint being written; interrupt again to "
                                                         "leave without it"));
  CHECK_THAT(e2e::read_file(dir + "/two.out"), Contains("Interrupted (SIGINT) at epoch 2 step 5/10: checkpoint "));
  auto two = e2e::trainer("run c.yaml --resume auto --runs-root two --run-dir resumed2", dir);
  INFO(two.out << two.err);
  REQUIRE(two.code == 0);
  CHECK_THAT(two.out, Contains("step-000005.safetensors: epoch 2, step 5/10"));

  // A third leaves at once, though the write would stall for minutes: the previous checkpoint stays.
  CHECK(run("three", "300", 2) < 3000);
  CHECK_THAT(e2e::read_file(dir + "/three.err"), Contains("trainer: left without finishing the checkpoint; the previous one "
                                                          "stays valid"));
  auto res = e2e::trainer("run c.yaml --resume auto --runs-root three --run-dir resumed3", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK_THAT(res.out, Contains("checkpoints/epoch-0001.safetensors: epoch 2, step 0/10"));
}

TEST_CASE("e2e checkpoint: Ctrl-C twice in quick succession, 20 tries: always the interrupt's checkpoint, and it resumes") {
  // Real signals from outside, as a user's two key presses: the first lands at a random point of
  // a training epoch, the second 0 to 20 ms later (seeded, printed; a step and a checkpoint write
  // of this model take about that long): in the step that finishes, or during the checkpoint
  // write. Each try must exit 130 with its "Interrupted" line, and `--resume` of the run must
  // continue from the checkpoint that line names (the newest). Before the fix try 3 left no checkpoint.
  std::string dir = setup("sigint_double", "");
  const char* seed_env = std::getenv("TRAINER_TEST_SEED");
  const unsigned seed = seed_env ? unsigned(std::strtoul(seed_env, nullptr, 10)) : 20261128u;
  std::mt19937 rng(seed);
  INFO("seed " << seed << " (TRAINER_TEST_SEED)");
  auto seconds = [](int ms) { return std::to_string(ms / 1000) + "." + std::to_string(1000 + ms % 1000).substr(1); };
  for (int t = 0; t < 20; ++t) {
    const int delay_ms = 50 + int(rng() % 300), gap_ms = int(rng() % 21);
    const std::string tag = "t" + std::to_string(t);
    std::string cmd = "cd '" + dir + "' && ('" TRAINER_BINARY "' run c.yaml --set train.epochs=1000 --run-dir " + tag + " >" + tag +
                      ".out 2>" + tag + ".err & pid=$!; for i in $(seq 600); do [ \"$(wc -l 2>/dev/null <" + tag +
                      "/metrics.csv)\" -ge 2 ] 2>/dev/null && break; sleep 0.02; done; "
                      "sleep " + seconds(delay_ms) + "; kill -INT $pid; sleep " + seconds(gap_ms) + "; kill -INT $pid; wait $pid; echo $? >" + tag + ".rc)";
    REQUIRE(std::system(cmd.c_str()) == 0);
    const std::string out = e2e::read_file(dir + "/" + tag + ".out"), err = e2e::read_file(dir + "/" + tag + ".err");
    INFO("try " << t << ": first signal " << delay_ms << " ms into training, second " << gap_ms << " ms later\n" << out << err);
    CHECK(e2e::read_file(dir + "/" + tag + ".rc") == "130\n");
    const size_t at = out.find("Interrupted (SIGINT) "), from = out.find(": checkpoint ", at);
    REQUIRE(at != std::string::npos);
    REQUIRE(from != std::string::npos);
    const std::string path = out.substr(from + 13, out.find(".safetensors", from) + 12 - from - 13);
    // Resumed from the run directory, it finishes the interrupted epoch from that checkpoint.
    const int epoch = std::stoi(out.substr(out.find("epoch ", at) + 6));
    auto res = e2e::trainer("run --resume " + tag + " --run-dir " + tag + "r --set train.epochs=" + std::to_string(epoch), dir);
    INFO(res.out << res.err);
    CHECK(res.code == 0);
    CHECK_THAT(res.out, Contains("Resuming from " + path + ": epoch "));
  }
}

TEST_CASE("e2e checkpoint: statistics read three steps late (a GPU's recorded steps) change nothing a run reports or writes") {
  // TRAINER_TEST_STATS_LAG holds every step's statistics until three more steps have run, as a
  // GPU's loop may; TRAINER_TEST_FIXED_STEP runs the fixed program, whose statistics come back
  // through read_back. Step checkpoints (every 4 global steps) and a stop must still be the
  // device's state at their step, and the console, metrics and checkpoints those of a run that
  // read every step at once.
  std::string dir = setup("lag", "checkpoint: {every_steps: 4, keep: 100}\n");
  const std::vector<std::pair<std::string, std::string>> runs{
      {"now", ""}, {"late", "TRAINER_TEST_STATS_LAG=3"}, {"fixed", "TRAINER_TEST_FIXED_STEP=1 TRAINER_TEST_STATS_LAG=3"}};
  for (const auto& [name, env] : runs) {
    auto r = e2e::trainer("run c.yaml --run-dir " + name, dir, env);
    INFO(name << ": " << r.out << r.err);
    REQUIRE(r.code == 0);
  }
  auto weights = [](const std::string& run_dir) {
    std::vector<std::string> names;
    for (const auto& f : fs::directory_iterator(run_dir + "/checkpoints"))
      if (f.path().extension() == ".safetensors") names.push_back(f.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  // metrics.jsonl: each epoch's time_s and where it went, the parts adding up to it.
  std::istringstream rows(e2e::read_file(dir + "/now/metrics.jsonl"));
  int epochs = 0;
  for (std::string line; std::getline(rows, line); ++epochs) {
    const auto j = nlohmann::json::parse(line);
    INFO(line);
    double parts = 0;
    for (const char* k : {"time_input_s", "time_step_s", "time_wait_s", "time_log_s", "time_checkpoint_s",
                          "time_validation_s", "time_epoch_end_s"}) {
      REQUIRE(j.contains(k));
      CHECK(j[k].get<double>() >= 0);
      parts += j[k].get<double>();
    }
    CHECK(j["time_step_s"].get<double>() > 0);
    CHECK(j["time_validation_s"].get<double>() > 0);
    CHECK(j["time_checkpoint_s"].get<double>() > 0);  // global steps 4 and 8, 12 and 16, 24 and 28
    CHECK(std::abs(parts + j["time_other_s"].get<double>() - j["time_s"].get<double>()) < 1e-6);
    CHECK(j["time_other_s"].get<double>() > -1e-6);
    // The step's host calls into a device (staging copies, programs' launches) and the waits that
    // left it idle: none on the CPU.
    for (const char* k : {"time_step_staging_s", "time_step_launch_s", "host_waits"}) {
      REQUIRE(j.contains(k));
      CHECK(j[k].get<double>() == 0);
    }
  }
  CHECK(epochs == 3);
  const std::vector<std::string> now = weights(dir + "/now");
  // Three epochs' and global steps 4, 8, 12, 16, 24 and 28's (20 ends epoch 2: its epoch checkpoint).
  CHECK(now.size() == 9);
  // Loss scaling with skipped steps (an inf injected: that step runs the ordinary way, after the
  // host has followed every step before it) and clipping: the program keeps the scale and counts
  // while the host reads late; metrics.csv's loss_scale, skipped_steps and grad_norm agree.
  const std::string scaled = " --set 'train.loss_scale={init_scale: 1024, growth_interval: 3}' --set train.clip_norm=0.5";
  for (const char* env : {"", "TRAINER_TEST_FIXED_STEP=1 TRAINER_TEST_STATS_LAG=3"}) {
    auto r = e2e::trainer("run c.yaml --run-dir scaled" + std::string(*env ? "-late" : "") + scaled, dir,
                          std::string(env) + " TRAINER_INJECT_NONFINITE=2,7,8,15");
    INFO(env << ": " << r.out << r.err);
    REQUIRE(r.code == 0);
  }
  const std::string scaled_rows = e2e::read_file(dir + "/scaled/metrics.csv");
  CHECK_THAT(scaled_rows, Contains("skipped_steps") && Contains("grad_norm"));
  CHECK(scaled_rows == e2e::read_file(dir + "/scaled-late/metrics.csv"));
  CHECK(same_file(dir + "/scaled/checkpoints/epoch-0003.safetensors", dir + "/scaled-late/checkpoints/epoch-0003.safetensors"));
  // The same with train.accumulate 3: an accumulated step's earlier micro-batches read nothing back
  // (their sums come with the last's, read late too); an inf asked for at a micro-batch runs it the
  // ordinary way between programs of its step (global steps 2, 7, 8, 15: each place in a step).
  for (const char* env : {"", "TRAINER_TEST_FIXED_STEP=1 TRAINER_TEST_STATS_LAG=3"}) {
    auto r = e2e::trainer("run c.yaml --run-dir accum" + std::string(*env ? "-late" : "") + scaled + " --set train.accumulate=3",
                          dir, std::string(env) + " TRAINER_INJECT_NONFINITE=2,7,8,15");
    INFO(env << ": " << r.out << r.err);
    REQUIRE(r.code == 0);
  }
  CHECK(e2e::read_file(dir + "/accum/metrics.csv") == e2e::read_file(dir + "/accum-late/metrics.csv"));
  CHECK(weights(dir + "/accum") == weights(dir + "/accum-late"));
  for (const std::string& f : weights(dir + "/accum")) {
    INFO(f);
    CHECK(same_file(dir + "/accum/checkpoints/" + f, dir + "/accum-late/checkpoints/" + f));
  }
  for (const char* run : {"late", "fixed"}) {
    INFO(run);
    CHECK(e2e::read_file(dir + "/now/metrics.csv") == e2e::read_file(dir + "/" + run + "/metrics.csv"));
    CHECK(weights(dir + "/" + run) == now);
    for (const std::string& f : now) {
      INFO(f);
      CHECK(same_file(dir + "/now/checkpoints/" + f, dir + "/" + run + "/checkpoints/" + f));
    }
  }
  // A stop read late: the interrupt's checkpoint is its step's, and the resumed run ends as the others.
  auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, "TRAINER_TEST_STATS_LAG=3 TRAINER_TEST_SIGINT_AT_STEP=14");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  CHECK_THAT(cut.out, Contains("Interrupted (SIGINT) at epoch 2 step 5/10"));
  CHECK(same_file(dir + "/now/checkpoints/epoch-0002-step-000002.safetensors",
                  dir + "/cut/checkpoints/epoch-0002-step-000002.safetensors"));
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir, "TRAINER_TEST_STATS_LAG=3");
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(same_file(dir + "/now/checkpoints/epoch-0003.safetensors", dir + "/resumed/checkpoints/epoch-0003.safetensors"));
  // terminate_on_nan names the same batch however late it reads it.
  std::vector<std::string> said;
  for (const char* env : {"", "TRAINER_TEST_STATS_LAG=3"}) {
    auto nan = e2e::trainer("run c.yaml --run-dir nan" + std::to_string(said.size()) +
                                " --set optimizer.type=sgd --set optimizer.lr=1e5 --set callbacks.terminate_on_nan=true",
                            dir, env);
    INFO(nan.out << nan.err);
    CHECK(nan.code == 0);
    const size_t at = nan.out.find("Batch ");
    REQUIRE(at != std::string::npos);
    said.push_back(nan.out.substr(at, nan.out.find('\n', at) - at));
  }
  CHECK(said[0] == said[1]);
}

TEST_CASE("e2e checkpoint on CUDA: recorded steps whose statistics are read late write what launched steps write") {
  if (e2e::skip_without_gpu()) return;
  // On one GPU every step from a batch size's third on is a replayed CUDA graph whose loss sums are
  // read two steps later (validation's too); TRAINER_CUDA_GRAPHS=0 launches each step and reads at
  // once. Strict fp32, so the two give the same bits (fixed_step_test): the same metrics and
  // checkpoints, step checkpoints included.
  std::string dir = setup("lag-cuda", "checkpoint: {every_steps: 4, keep: 100}\n");
  for (const char* graphs : {"0", "1"}) {
    auto r = e2e::trainer(std::string("run c.yaml --gpus 0 --set devices.tf32=false --run-dir g") + graphs, dir,
                          std::string("TRAINER_CUDA_GRAPHS=") + graphs);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
  }
  CHECK(e2e::read_file(dir + "/g0/metrics.csv") == e2e::read_file(dir + "/g1/metrics.csv"));
  size_t compared = 0;
  for (const auto& f : fs::directory_iterator(dir + "/g0/checkpoints")) {
    if (f.path().extension() != ".safetensors") continue;
    INFO(f.path().filename());
    CHECK(same_file(f.path().string(), dir + "/g1/checkpoints/" + f.path().filename().string()));
    ++compared;
  }
  CHECK(compared == 9);
}
