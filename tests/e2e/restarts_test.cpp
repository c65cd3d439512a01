// `trainer run --max-restarts N` from outside: a child killed at a random step is restarted from the newest checkpoint and ends bit-identical to an uninterrupted run; a stall is retried, then given up; config and data errors are never retried.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "cli.h"
#include "small_cnn.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using e2e::SmallCnn;

// 100 steps per epoch, a checkpoint every 7 steps and after every epoch; BN-free.
const std::string kConfig = [] {
  SmallCnn c;
  c.name = "rs";
  c.train_size = 3200;
  c.train = "{epochs: 4, batch_size: 32, watchdog_s: 1}";
  c.extra = "checkpoint: {every_steps: 7}\n";
  return c.yaml();
}();

const std::string kBinary = "'" TRAINER_BINARY "'";

}  // namespace

TEST_CASE("e2e restarts: a run killed at a random step restarts from its newest checkpoint and ends bit-identical") {
  std::string dir = e2e::temp_dir("restarts_kill");
  e2e::write_file(dir + "/c.yaml", kConfig);
  e2e::Result full = e2e::trainer("run c.yaml --run-dir full", dir);
  REQUIRE(full.code == 0);
  std::random_device rd;
  // After the first epoch's row: somewhere in epochs 2-4. Where a slow moment let the run end
  // before the kill, again with a quarter of the delay, then with none, each in a run of its own.
  const int first_delay_ms = int(rd() % 400);
  std::string sup, out;
  int attempt = 0;
  for (int delay_ms : {first_delay_ms, first_delay_ms / 4, 0}) {
    sup = "sup" + std::to_string(++attempt);
    INFO("SIGKILL of the child " << delay_ms << " ms after the first epoch's row");
    // The supervisor in the background; its child (the run) is killed with SIGKILL.
    const std::string script =
        "cd '" + dir + "' && (timeout -k 5 120 " + kBinary + " run c.yaml --run-dir " + sup + " --max-restarts 2 >" + sup +
        ".out 2>&1 & sup=$!; for i in $(seq 1200); do [ -f " + sup + "/metrics.csv ] && [ \"$(wc -l <" + sup +
        "/metrics.csv)\" -ge 2 ] && break; sleep 0.01; done; sleep " + std::to_string(delay_ms / 1000.0) +
        "; pkill -KILL -P $(pgrep -P $sup); wait $sup; echo $? >" + sup + ".rc)";
    REQUIRE(std::system(script.c_str()) == 0);
    out = e2e::read_file(dir + "/" + sup + ".out");
    INFO(out);
    CHECK(e2e::read_file(dir + "/" + sup + ".rc") == "0\n");
    if (fs::exists(dir + "/" + sup + "-restart-1")) break;
    WARN("the kill came after the run had ended (" << delay_ms << " ms): again, sooner");
    sup.clear();
  }
  if (sup.empty()) FAIL("every kill came after the run had ended: nothing was restarted");
  INFO(out);
  CHECK_THAT(e2e::read_file(dir + "/" + sup + "/restarts.log"),
             Contains("restart 1 of 2: the run in " + sup + " was killed by signal 9 (Killed); resuming from " + sup +
                      "/checkpoints/epoch-"));
  CHECK_THAT(out, Contains("trainer: ") && Contains(" restart 1 of 2: "));
  CHECK(e2e::read_file(dir + "/full/checkpoints/epoch-0004.safetensors") ==
        e2e::read_file(dir + "/" + sup + "-restart-1/checkpoints/epoch-0004.safetensors"));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/" + sup + "-restart-1/metrics.csv"));
}

TEST_CASE("e2e restarts: a stall (the watchdog, exit 5) is retried from the watchdog's checkpoint, then given up") {
  std::string dir = e2e::temp_dir("restarts_stall");
  e2e::write_file(dir + "/c.yaml", kConfig);
  // Every attempt's rank 0 stops at global step 150 (epoch 2): the restart gets there again.
  e2e::Result r = e2e::trainer("run c.yaml --run-dir sup --max-restarts 1", dir, "TRAINER_TEST_HOLD=0:150 timeout -k 5 60");
  INFO(r.out << r.err);
  CHECK(r.code == 5);
  const std::string log = e2e::read_file(dir + "/sup/restarts.log");
  INFO(log);
  CHECK_THAT(log, Contains("restart 1 of 1: the run in sup exited 5; resuming from sup/checkpoints/epoch-0002-step-0000"));
  CHECK_THAT(log, Contains("the run in sup-restart-1 exited 5: not restarted, 1 restart of 1 used"));
  CHECK_THAT(r.err, Contains("stalled: no progress for "));
}

TEST_CASE("e2e restarts: a config error or a data error is never retried") {
  std::string dir = e2e::temp_dir("restarts_user");
  e2e::write_file(dir + "/c.yaml", kConfig);
  e2e::Result cfg = e2e::trainer("run c.yaml --run-dir a --max-restarts 3 --set train.epochs=0", dir);
  CHECK(cfg.code == 2);
  CHECK_THAT(cfg.err, Contains("train.epochs"));
  CHECK(!fs::exists(dir + "/a"));
  std::string bad = kConfig;
  bad.replace(bad.find("{type: synthetic, size: 3200, image_size: 16, classes: 4, seed: 1}"),
              std::string("{type: synthetic, size: 3200, image_size: 16, classes: 4, seed: 1}").size(),
              "{type: npy, x: missing.npy, labels: missing_y.npy}");
  e2e::write_file(dir + "/bad.yaml", bad);
  e2e::Result data = e2e::trainer("run bad.yaml --run-dir b --max-restarts 3", dir);
  INFO(data.out << data.err);
  CHECK(data.code == 3);
  CHECK_THAT(data.err, Contains("missing.npy"));
  CHECK(!fs::exists(dir + "/b/restarts.log"));
  CHECK(!fs::exists(dir + "/b-restart-1"));
}
