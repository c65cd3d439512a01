// Loss scaling through the CLI: injected inf gradients skip steps, the scale backs off and grows, metrics and the console report it, and a resumed run continues with the saved scale; gradient clipping with it.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "cli.h"
#include "small_cnn.h"

using Catch::Contains;

namespace {

using e2e::SmallCnn;

// 10 steps per epoch (320 samples, batch 32), 3 epochs; BN-free, so 2 replicas give the same gradients.
const std::string kConfig = [] {
  SmallCnn c;
  c.name = "ls";
  c.train = "{epochs: 3, batch_size: 32, loss_scale: {growth_interval: 4}}";
  c.optimizer = "{type: sgd, lr: 0.02, momentum: 0.9}";
  return c.yaml();
}();

// Steps 2 and 3 (epoch 1) and 14 (epoch 2) get an inf gradient.
const char* kPoison = "TRAINER_INJECT_NONFINITE=2,3,14";

// metrics.csv as one column -> value map per row.
std::vector<std::map<std::string, std::string>> csv_rows(const std::string& path) {
  std::istringstream in(e2e::read_file(path));
  std::string line;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& l) {
    std::vector<std::string> out;
    std::stringstream ss(l);
    std::string cell;
    while (std::getline(ss, cell, ',')) out.push_back(cell);
    return out;
  };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (header.empty()) {
      header = split(line);
      continue;
    }
    std::vector<std::string> cells = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("e2e loss scale: injected inf gradients skip steps, the scale backs off and grows, metrics show both") {
  std::string dir = e2e::temp_dir("loss_scale");
  e2e::write_file(dir + "/c.yaml", kConfig);
  auto r = e2e::trainer("run c.yaml --run-dir full", dir, kPoison);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("loss scale dynamic (initial 65536, x2 after 4 finite steps"));
  // Epoch 1: 65536 -> 32768 (step 2) -> 16384 (step 3) -> 32768 (steps 4-7 finite).
  CHECK_THAT(r.out, Contains("Loss scale 32768; 2 of 10 steps skipped this epoch (inf/NaN gradients), 2 in all"));
  // Epoch 2: 65536 (steps 8-11) -> 32768 (step 14) -> 65536 (steps 15-18).
  CHECK_THAT(r.out, Contains("Loss scale 65536; 1 of 10 steps skipped this epoch (inf/NaN gradients), 3 in all"));
  // Epoch 3: 131072 (steps 19-22), 262144 (steps 23-26).
  CHECK_THAT(r.out, Contains("Loss scale 262144; 0 of 10 steps skipped this epoch (inf/NaN gradients), 3 in all"));
  auto rows = csv_rows(dir + "/full/metrics.csv");
  REQUIRE(rows.size() == 3);
  CHECK(std::stod(rows[0].at("loss_scale")) == 32768);
  CHECK(std::stod(rows[0].at("skipped_steps")) == 2);
  CHECK(std::stod(rows[1].at("loss_scale")) == 65536);
  CHECK(std::stod(rows[1].at("skipped_steps")) == 1);
  CHECK(std::stod(rows[2].at("loss_scale")) == 262144);
  CHECK(std::stod(rows[2].at("skipped_steps")) == 0);
  CHECK_THAT(e2e::read_file(dir + "/full/metrics.jsonl"), Contains("\"skipped_steps\""));
  // A skipped step does not count as an optimizer step (30 steps, 3 skipped).
  std::string sidecar = e2e::read_file(dir + "/full/checkpoints/epoch-0003.json");
  CHECK_THAT(sidecar, Contains("\"optimizer_steps\": 27"));
  CHECK_THAT(sidecar, Contains("\"skipped_total\": 3"));

  SECTION("SIGINT mid-epoch after a skipped step, then --resume: the same scale, metrics and weights") {
    auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, std::string(kPoison) + " TRAINER_TEST_SIGINT_AT_STEP=16");
    INFO(cut.out << cut.err);
    REQUIRE(cut.code == 130);
    CHECK_THAT(e2e::read_file(dir + "/cut/checkpoints/epoch-0002-step-000007.json"), Contains("\"scale\": 32768.0"));
    auto res = e2e::trainer("run --resume cut --run-dir resumed", dir, kPoison);
    INFO(res.out << res.err);
    REQUIRE(res.code == 0);
    CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
    CHECK(e2e::read_file(dir + "/full/checkpoints/epoch-0003.safetensors") ==
          e2e::read_file(dir + "/resumed/checkpoints/epoch-0003.safetensors"));
  }
  SECTION("two replicas take the same decisions (the inf on rank 0 reaches both through the all-reduce)") {
    auto two = e2e::trainer("run c.yaml --cpu 2 --set train.batch_size=16 --run-dir two", dir, kPoison);
    INFO(two.out << two.err);
    REQUIRE(two.code == 0);
    auto a = csv_rows(dir + "/full/metrics.csv"), b = csv_rows(dir + "/two/metrics.csv");
    REQUIRE(b.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(a[i].at("loss_scale") == b[i].at("loss_scale"));
      CHECK(a[i].at("skipped_steps") == b[i].at("skipped_steps"));
    }
  }
}

TEST_CASE("e2e loss scale: dynamic scaling without overflows trains bit-identically to none, which has no loss-scale columns") {
  std::string dir = e2e::temp_dir("loss_scale_none");
  std::string config = kConfig;
  config.replace(config.find(", loss_scale: {growth_interval: 4}"), std::string(", loss_scale: {growth_interval: 4}").size(), "");
  e2e::write_file(dir + "/c.yaml", config);
  auto r = e2e::trainer("run c.yaml --run-dir plain", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, !Contains("Loss scale"));
  CHECK_THAT(e2e::read_file(dir + "/plain/metrics.csv"), !Contains("loss_scale"));
  auto d = e2e::trainer("run c.yaml --run-dir dynamic --set train.loss_scale=dynamic", dir);
  INFO(d.out << d.err);
  REQUIRE(d.code == 0);
  CHECK_THAT(d.out, Contains("Loss scale 65536; 0 of 10 steps skipped"));
  std::string a = e2e::read_file(dir + "/plain/checkpoints/epoch-0003.safetensors");
  CHECK(!a.empty());
  CHECK(a == e2e::read_file(dir + "/dynamic/checkpoints/epoch-0003.safetensors"));
}

TEST_CASE("e2e clipping: clip_norm acts on the unscaled gradients, skips with the skipped steps, and resumes exactly") {
  std::string dir = e2e::temp_dir("clip");
  std::string config = kConfig;
  const std::string ls = ", loss_scale: {growth_interval: 4}";
  config.replace(config.find(ls), ls.size(), ", clip_norm: 0.2");
  e2e::write_file(dir + "/c.yaml", config);
  auto plain = e2e::trainer("run c.yaml --run-dir plain", dir);
  INFO(plain.out << plain.err);
  REQUIRE(plain.code == 0);
  CHECK_THAT(plain.out, Contains("gradients clip_norm 0.2 (global L2 norm, Keras's coefficient)"));
  auto rows = csv_rows(dir + "/plain/metrics.csv");
  REQUIRE(rows.size() == 3);
  for (const auto& row : rows) CHECK(std::stod(row.at("grad_norm")) > 0.2);  // every epoch clipped on average
  // A static power-of-two loss scale is divided out exactly before the norm: the same bits.
  auto scaled = e2e::trainer("run c.yaml --run-dir scaled --set train.loss_scale=1024", dir);
  INFO(scaled.out << scaled.err);
  REQUIRE(scaled.code == 0);
  CHECK(e2e::read_file(dir + "/plain/checkpoints/epoch-0003.safetensors") ==
        e2e::read_file(dir + "/scaled/checkpoints/epoch-0003.safetensors"));
  auto srows = csv_rows(dir + "/scaled/metrics.csv");
  REQUIRE(srows.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(srows[i].at("grad_norm") == rows[i].at("grad_norm"));
  // Steps with inf gradients are skipped, not clipped: the epoch's grad_norm averages the others.
  auto poisoned = e2e::trainer("run c.yaml --run-dir poisoned --set train.loss_scale=dynamic", dir, kPoison);
  INFO(poisoned.out << poisoned.err);
  REQUIRE(poisoned.code == 0);
  auto prows = csv_rows(dir + "/poisoned/metrics.csv");
  REQUIRE(prows.size() == 3);
  CHECK(std::stod(prows[0].at("skipped_steps")) == 2);
  CHECK(std::isfinite(std::stod(prows[0].at("grad_norm"))));
  // An interrupt mid-epoch and --resume: the same metrics (grad_norm's sums are in the checkpoint) and weights.
  auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=15");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  CHECK_THAT(e2e::read_file(dir + "/cut/checkpoints/epoch-0002-step-000006.json"), Contains("\"grad_norm_count\": 6"));
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(e2e::read_file(dir + "/plain/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
  CHECK(e2e::read_file(dir + "/plain/checkpoints/epoch-0003.safetensors") ==
        e2e::read_file(dir + "/resumed/checkpoints/epoch-0003.safetensors"));
}
