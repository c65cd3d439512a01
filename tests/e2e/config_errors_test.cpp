// Every class of config error: one line naming file:line:col (or the --set), and exit code 2.
#include <catch2/catch.hpp>

#include "cli.h"

using Catch::Contains;
using Catch::StartsWith;

namespace {

const char* kModel = R"(model:
  input: [8, 8, 3]
  layers:
    - {name: conv, type: conv2d, filters: 4, kernel: 3}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 3}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 3}
)";

e2e::Result run_config(const std::string& yaml, const std::string& extra = "") {
  std::string dir = e2e::temp_dir("cfg");
  e2e::write_file(dir + "/bad.yaml", yaml);
  return e2e::trainer("run bad.yaml " + extra, dir);
}

}  // namespace

TEST_CASE("e2e config error: YAML syntax") {
  auto r = run_config("model:\n  input: [8, 8, 3\n  layers: []\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:3:"));
}

TEST_CASE("e2e config error: unknown key suggests the nearest valid one") {
  auto r = run_config(std::string(kModel) + "optimzer: {type: sgd}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:9:1: unknown key 'optimzer'") && Contains("did you mean 'optimizer'"));
  auto r2 = run_config(std::string(kModel) + "train: {epochs: 1, bacth_size: 8}\n");
  CHECK(r2.code == 2);
  CHECK_THAT(r2.err, StartsWith("bad.yaml:9:20: unknown key 'bacth_size'") && Contains("did you mean 'batch_size'"));
}

TEST_CASE("e2e config error: wrong type") {
  auto r = run_config(std::string(kModel) + "train: {epochs: ten}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:9:17:") && Contains("must be an integer, not 'ten'"));
  auto r2 = run_config(std::string(kModel) + "optimizer: {type: sgd, nesterov: maybe, momentum: 0.9}\n");
  CHECK(r2.code == 2);
  CHECK_THAT(r2.err, StartsWith("bad.yaml:9:34:") && Contains("true or false"));
}

TEST_CASE("e2e config error: bad shape") {
  auto r = run_config("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: dense, type: dense, units: 3}\n"
                      "data: {train: {type: synthetic}}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:4:7:") && Contains("needs a flat input"));
  auto r2 = run_config("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: c, type: conv2d, filters: 2, kernel: 9}\n"
                       "data: {train: {type: synthetic}}\n");
  CHECK(r2.code == 2);
  CHECK_THAT(r2.err, StartsWith("bad.yaml:4:7:") && Contains("does not fit"));
  auto r3 = run_config("model:\n  input: [8, 8]\n  layers:\n    - {name: f, type: flatten}\n"
                       "data: {train: {type: synthetic}}\n");
  CHECK(r3.code == 2);
  CHECK_THAT(r3.err, StartsWith("bad.yaml:2:10:"));
}

TEST_CASE("e2e config error: unknown layer type") {
  auto r = run_config("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: c, type: convolution2d, filters: 2}\n"
                      "data: {train: {type: synthetic}}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:4:23: unknown layer type 'convolution2d'"));
}

TEST_CASE("e2e config error: missing input") {
  auto r = run_config("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: c, type: conv2d, filters: 2, kernel: 3}\n"
                      "    - {name: j, type: concat, inputs: [c, conv]}\n"
                      "data: {train: {type: synthetic}}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:5:43:") && Contains("input 'conv'"));
}

TEST_CASE("e2e config error: cycle") {
  auto r = run_config("model:\n  input: [4]\n  layers:\n    - {name: a, type: dense, units: 4, inputs: [b]}\n"
                      "    - {name: b, type: dense, units: 4, inputs: [a]}\n"
                      "data: {train: {type: synthetic}}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("bad.yaml:") && Contains("cycle: "));
}

TEST_CASE("e2e config error: --set value and usage errors") {
  auto r = run_config(kModel, "--set train.epochs=lots");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, StartsWith("--set train.epochs=lots:") && Contains("must be an integer"));
  auto r2 = e2e::trainer("run /nonexistent/config.yaml");
  CHECK(r2.code == 2);
  CHECK_THAT(r2.err, Contains("/nonexistent/config.yaml") && Contains("cannot open"));
  auto r3 = e2e::trainer("run --no-such-flag x.yaml");
  CHECK(r3.code == 2);
  auto r4 = e2e::trainer("frobnicate");
  CHECK(r4.code == 2);
}

TEST_CASE("e2e data and device errors have their own exit codes") {
  auto r = run_config("model:\n  input: [8, 8, 3]\n  layers:\n    - {type: flatten}\n    - {type: dense, units: 2}\n"
                      "data: {train: {type: image_folder, path: no/such/folder}}\n");
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Contains("no/such/folder"));
  auto r2 = run_config(kModel, "--gpus 0");
  CHECK(r2.code == 4);
  CHECK_THAT(r2.err, StartsWith("device error:"));
}
