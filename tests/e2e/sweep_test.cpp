// scripts/sweep.sh end to end: a 2x2 grid of tiny quickstart runs, and a grid with a bad value.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "cli.h"

namespace {

// Each run: one epoch on 256 training and 64 validation images, one compute thread.
const std::string kTiny = " -- --set train.epochs=1 --set data.train.size=256 --set data.val.size=64 --threads 1";

e2e::Result sweep(const std::string& args, const std::string& cwd) {
  std::string cmd = "cd '" + cwd + "' && TRAINER='" TRAINER_BINARY "' '" TRAINER_SOURCE_DIR "/scripts/sweep.sh' " + args +
                    " >sweep.out 2>sweep.err </dev/null";
  int st = std::system(cmd.c_str());
  e2e::Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = e2e::read_file(cwd + "/sweep.out");
  r.err = e2e::read_file(cwd + "/sweep.err");
  return r;
}

// results.csv as rows of cells (no cell here holds a comma or a quote).
std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream ss(e2e::read_file(path));
  for (std::string line; std::getline(ss, line);) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("e2e sweep: a 2x2 grid, two at a time, gives one results row and run directory per point") {
  std::string dir = e2e::temp_dir("sweep");
  auto r = sweep("-j 2 --out grid '" TRAINER_SOURCE_DIR "/configs/quickstart.yaml' optimizer.lr=0.01,0.003 "
                 "train.batch_size=32,64" + kTiny, dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto rows = read_csv(dir + "/grid/results.csv");
  REQUIRE(rows.size() == 5);
  CHECK(rows[0] == std::vector<std::string>{"index", "optimizer.lr", "train.batch_size", "exit_code", "run_dir", "loss",
                                            "accuracy", "val_loss", "val_accuracy", "images_per_second", "epochs"});
  std::vector<std::pair<std::string, std::string>> grid{{"0.01", "32"}, {"0.01", "64"}, {"0.003", "32"}, {"0.003", "64"}};
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    INFO("row " << i);
    REQUIRE(row.size() == rows[0].size());
    CHECK(row[0] == std::to_string(i));
    CHECK(row[1] == grid[i - 1].first);
    CHECK(row[2] == grid[i - 1].second);
    CHECK(row[3] == "0");
    CHECK(std::stod(row[5]) > 0);     // loss
    CHECK(std::stod(row[8]) >= 0);    // val_accuracy
    CHECK(std::stod(row[9]) > 0);     // images_per_second
    CHECK(row[10] == "1");            // epochs
    // The run directory holds the run, with the override applied to its resolved config.
    std::string run = dir + "/" + row[4];
    REQUIRE(std::filesystem::exists(run + "/metrics.csv"));
    CHECK_THAT(e2e::read_file(run + "/config.yaml"), Catch::Contains("batch_size: " + grid[i - 1].second));
  }
}

TEST_CASE("e2e sweep: a run that fails is a row with its exit code and the sweep exits non-zero") {
  std::string dir = e2e::temp_dir("sweep-bad");
  auto r = sweep("--out bad '" TRAINER_SOURCE_DIR "/configs/quickstart.yaml' optimizer.lr=abc,0.01" + kTiny, dir);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  auto rows = read_csv(dir + "/bad/results.csv");
  REQUIRE(rows.size() == 3);
  CHECK(rows[1][1] == "abc");
  CHECK(rows[1][2] == "2");  // usage/config error
  CHECK(rows[1][4].empty());  // no loss
  CHECK(rows[2][1] == "0.01");
  CHECK(rows[2][2] == "0");
  CHECK_THAT(r.out, Catch::Contains("1 failed"));
}

TEST_CASE("e2e sweep: usage errors exit 2 before any run") {
  std::string dir = e2e::temp_dir("sweep-usage");
  CHECK(sweep("'" TRAINER_SOURCE_DIR "/configs/quickstart.yaml'", dir).code == 2);              // no grid
  CHECK(sweep("'" TRAINER_SOURCE_DIR "/configs/quickstart.yaml' optimizer.lr", dir).code == 2);  // not KEY=V
  CHECK(sweep("-j 0 '" TRAINER_SOURCE_DIR "/configs/quickstart.yaml' optimizer.lr=1", dir).code == 2);
  CHECK_FALSE(std::filesystem::exists(dir + "/runs"));
}
