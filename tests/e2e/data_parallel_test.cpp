// End-to-end data parallelism on CPU replicas: --cpu N trains, a failing replica exits 4
// promptly, device requests that cannot work are refused with their exit code.
#include <catch2/catch.hpp>

#include <chrono>

#include "cli.h"

TEST_CASE("e2e data parallel: --cpu 3 trains smoke.yaml and reports the global batch") {
  std::string dir = e2e::temp_dir("dp");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --cpu 3 --run-dir run --set optimizer.lr_scaling=linear", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("3 replicas") && Catch::Contains("global batch 96") &&
                        Catch::Contains("linear scaling x3"));
}

TEST_CASE("e2e data parallel: an injected replica failure stops every replica and exits 4 within seconds") {
  std::string dir = e2e::temp_dir("dpfault");
  auto t0 = std::chrono::steady_clock::now();
  auto f = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --cpu 3 --run-dir run", dir, "TRAINER_INJECT_FAULT=2:7 timeout 60");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(f.out << f.err);
  CHECK(f.code == 4);
  CHECK_THAT(f.err, Catch::Contains("replica 2 failed: injected fault at step 7"));
  CHECK(secs < 15);
}

TEST_CASE("e2e data parallel: impossible device requests are refused") {
  auto bad = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --gpus 0,x");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::StartsWith("--gpus 0,x:"));
  auto zero = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --cpu 0");
  CHECK(zero.code == 2);
  auto both = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --cpu 2 --gpus 1");
  CHECK(both.code == 2);
  auto dev = e2e::trainer("devices");
  if (dev.out.find("cuda:0:") == std::string::npos) {
    auto g = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --gpus 2");
    CHECK(g.code == 4);
    CHECK_THAT(g.err, Catch::Contains("none is visible"));
  } else {
    auto g = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --gpus 0,1,1");
    CHECK(g.code == 4);
  }
}
