// Names holding a newline or a quote: an error about them stays one stderr line (escaped), and
// `--json` output stays valid JSON that gives the name back exactly.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "cli.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

const char* kConfig = R"(name: names
model:
  input: [4, 4, 3]
  layers:
    - {type: conv2d, filters: 2, kernel: 1}
    - {type: global_avg_pool2d}
    - {type: dense, units: 2}
    - {type: softmax}
data:
  train: DATA
train: {epochs: 1, batch_size: 2}
optimizer: {type: sgd, lr: 0.01}
devices: {cpu: 1}
)";

std::string config_with(const std::string& data) {
  std::string c = kConfig;
  return c.replace(c.find("DATA"), 4, data);
}

}  // namespace

TEST_CASE("e2e names: a data folder whose name holds a newline and a quote fails in one escaped line") {
  const std::string dir = e2e::temp_dir("names-data");
  const std::string folder = "im\"gs\nx";  // the YAML below spells it "im\"gs\nx"
  fs::create_directories(dir + "/" + folder + "/a");
  std::ofstream(dir + "/" + folder + "/a/1\n.png", std::ios::binary) << "not an image";
  e2e::write_file(dir + "/c.yaml", config_with(R"({type: image_folder, path: "im\"gs\nx"})"));
  auto r = e2e::trainer("run c.yaml", dir, "timeout 60");
  INFO(r.err);
  CHECK(r.code == 3);
  REQUIRE(!r.err.empty());
  CHECK(r.err.find('\n') == r.err.size() - 1);  // exactly one line
  CHECK(r.err == "data error: im\"gs\\nx/a/1\\n.png: not a JPEG or PNG file (first bytes 6e 6f 74 20 61 6e 20 69)\n");
}

TEST_CASE("e2e names: run --json with a run directory holding a quote and a newline prints valid JSON naming it") {
  const std::string dir = e2e::temp_dir("names-json");
  e2e::write_file(dir + "/c.yaml", config_with("{type: synthetic, size: 8, image_size: 4, classes: 2}"));
  auto r = e2e::trainer("run c.yaml --json --run-dir \"$(printf 'r\"un\\nx')\"", dir, "timeout 120");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  const nlohmann::json j = e2e::last_json(r.out);  // throws unless the line is JSON
  CHECK(j["run_dir"] == "r\"un\nx");
  CHECK(j["epochs"] == 1);
  CHECK_THAT(j["checkpoint"].get<std::string>(), Contains("r\"un\nx/checkpoints/"));
  CHECK(fs::exists(dir + "/r\"un\nx/metrics.jsonl"));
  // The console names the directory on one line, escaped.
  CHECK_THAT(r.out, Contains("Run directory: r\"un\\nx\n"));
  // metrics.jsonl: one JSON object per line.
  std::ifstream in(dir + "/r\"un\nx/metrics.jsonl");
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(nlohmann::json::parse(line)["epoch"] == 0);
}
