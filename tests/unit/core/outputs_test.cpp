// A run's output files: curves.png (a real PNG with the curves drawn), metrics.jsonl lines, and
// metrics.csv read back as written.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/data/image.h"
#include "core/io/curves.h"
#include "core/io/run_dir.h"
#include "skip.h"
#include "test_dirs.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& tag) { return trainer::test::test_dir("outputs-" + tag); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rows like a run's: loss falls, accuracy rises; val columns optional.
MetricRows rows(int epochs, bool val) {
  MetricRows out;
  for (int e = 0; e < epochs; ++e) {
    double t = double(e) / std::max(1, epochs - 1);
    Metrics m{{"accuracy", 0.3 + 0.6 * t}, {"loss", 2.0 - 1.5 * t}, {"lr", 0.01}};
    if (val) {
      m.push_back({"val_accuracy", 0.25 + 0.6 * t});
      m.push_back({"val_loss", 2.2 - 1.5 * t});
    }
    out.push_back({e, m});
  }
  return out;
}

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  // Pixels within 12 of the colour in every channel (curves are antialiased at their edges only),
  // in columns [x0, x1) (default: all).
  int count(unsigned colour, int x0 = 0, int x1 = -1) const {
    int r = int(colour >> 16) & 255, g = int(colour >> 8) & 255, b = int(colour) & 255, n = 0;
    for (int y = 0; y < height; ++y)
      for (int x = x0; x < (x1 < 0 ? width : x1); ++x) {
        const uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
        n += std::abs(p[0] - r) <= 12 && std::abs(p[1] - g) <= 12 && std::abs(p[2] - b) <= 12;
      }
    return n;
  }
};

// Checks the PNG signature and IHDR by hand, then decodes the pixels.
Image read_png(const std::string& path) {
  std::string d = slurp(path);
  REQUIRE(d.size() > 33);
  REQUIRE(d.compare(0, 8, "\x89PNG\r\n\x1a\n", 8) == 0);
  REQUIRE(d.compare(12, 4, "IHDR") == 0);
  auto be32 = [&](size_t at) {
    return int(uint8_t(d[at])) << 24 | int(uint8_t(d[at + 1])) << 16 | int(uint8_t(d[at + 2])) << 8 | int(uint8_t(d[at + 3]));
  };
  Image img;
  img.width = be32(16);
  img.height = be32(20);
  REQUIRE(img.width >= 320);
  REQUIRE(img.width <= 4000);
  REQUIRE(img.height >= 240);
  REQUIRE(img.height <= 4000);
  img.rgb.resize(size_t(img.width) * size_t(img.height) * 3);
  decode_png_rgb(reinterpret_cast<const uint8_t*>(d.data()), d.size(), path, img.rgb.data(), img.height, img.width);
  return img;
}

constexpr unsigned kTrainLoss = 0xE24A33, kValLoss = 0x348ABD, kTrainAcc = 0x988ED5;

}  // namespace

TEST_CASE("outputs: curves.png for 20 epochs with validation has all four curves") {
  std::string dir = temp_dir("curves20");
  std::string error;
  REQUIRE(plot_curves(rows(20, true), dir + "/curves.png", "quickstart", &error));
  CHECK(error.empty());
  Image img = read_png(dir + "/curves.png");
  CHECK(img.count(kTrainLoss) > 200);  // a line across the plot, not a speck
  CHECK(img.count(kValLoss) > 200);
  CHECK(img.count(kTrainAcc) > 200);
  CHECK_FALSE(fs::exists(dir + "/curves.png.tmp"));
}

TEST_CASE("outputs: curves.png without validation columns draws only the training curves") {
  std::string dir = temp_dir("curves-noval");
  std::string error;
  REQUIRE(plot_curves(rows(20, false), dir + "/curves.png", "m", &error));
  Image img = read_png(dir + "/curves.png");
  CHECK(img.count(kTrainLoss) > 200);
  CHECK(img.count(kValLoss) == 0);
}

TEST_CASE("outputs: curves.png for a one-epoch run shows its points") {
  std::string dir = temp_dir("curves1");
  for (bool val : {true, false}) {
    std::string error;
    INFO("val " << val);
    REQUIRE(plot_curves(rows(1, val), dir + "/curves.png", "one#epoch", &error));
    Image img = read_png(dir + "/curves.png");
    // Dots of 5 px radius mid-plot (x = 0.10 + 0.85 / 2 of the width), where no legend is.
    int mid = img.width * 525 / 1000;
    CHECK(img.count(kTrainLoss, mid - 10, mid + 10) > 20);
    CHECK(img.count(kTrainAcc, mid - 10, mid + 10) > 20);
    CHECK((img.count(kValLoss, mid - 10, mid + 10) > 20) == val);
  }
}

TEST_CASE("outputs: curves.png skips NaN values and fails with a reason, never a crash") {
  std::string dir = temp_dir("curves-fail");
  MetricRows r = rows(5, true);
  r[2].second[1].second = NAN;  // a NaN loss in the middle: two runs of points
  std::string error;
  CHECK(plot_curves(r, dir + "/curves.png", "m", &error));

  MetricRows none{{0, {{"loss", NAN}, {"lr", 0.1}}}};
  CHECK_FALSE(plot_curves(none, dir + "/none.png", "m", &error));
  CHECK_THAT(error, Catch::Contains("no finite"));
  CHECK_FALSE(fs::exists(dir + "/none.png"));

  error.clear();
  CHECK_FALSE(plot_curves(rows(3, true), dir + "/missing/sub/curves.png", "m", &error));
  CHECK_THAT(error, Catch::Contains(dir + "/missing/sub/curves.png"));
}

TEST_CASE("outputs: curves.png from several threads at once") {
  std::string dir = temp_dir("curves-threads");
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::string error;
      ok[size_t(t)] = plot_curves(rows(3 + t, t % 2 == 0), dir + "/c" + std::to_string(t) + ".png", "m", &error);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    CHECK(ok[size_t(t)]);
    read_png(dir + "/c" + std::to_string(t) + ".png");
  }
}

TEST_CASE("outputs: metrics.jsonl has one JSON object per epoch, NaN and inf as null") {
  std::string dir = temp_dir("jsonl");
  {
    MetricRows earlier{{0, {{"accuracy", 0.5}, {"loss", 1.25}}}};
    MetricsLogger log(MetricsLogger::Format::Jsonl, dir + "/metrics.jsonl", earlier);
    log.write(1, {{"accuracy", 0.75}, {"loss", NAN}, {"lr", 1e-05}, {"val_loss", INFINITY}, {"time_s", 2.5}});
  }
  CHECK(slurp(dir + "/metrics.jsonl") ==
        "{\"epoch\":0,\"accuracy\":0.5,\"loss\":1.25}\n"
        "{\"epoch\":1,\"accuracy\":0.75,\"loss\":null,\"lr\":1e-05,\"val_loss\":null,\"time_s\":2.5}\n");
}

TEST_CASE("outputs: metrics.csv reads back as MetricsLogger wrote it") {
  std::string dir = temp_dir("csv");
  MetricRows in{{0, {{"accuracy", 0.1}, {"loss", 2.302585092994046}, {"lr", 0.003}, {"val_loss", NAN}}},
                {1, {{"accuracy", 1.0 / 3}, {"loss", 1e-07}, {"lr", 0.0015}, {"val_loss", 0.5}}},
                {2, {{"accuracy", 0.9}, {"loss", 0.25}, {"val_loss", 0.4}}}};  // no lr: an empty cell
  {
    MetricsLogger csv(MetricsLogger::Format::Csv, dir + "/metrics.csv", MetricRows(in.begin(), in.begin() + 1));  // as a resumed run
    csv.write(1, in[1].second);
    csv.write(2, in[2].second);
  }
  CHECK(slurp(dir + "/metrics.csv").rfind("epoch,accuracy,loss,lr,val_loss\n0,0.1,", 0) == 0);
  MetricRows out = read_metrics_csv(dir + "/metrics.csv");
  REQUIRE(out.size() == in.size());
  for (size_t r = 0; r < in.size(); ++r) {
    CHECK(out[r].first == in[r].first);
    REQUIRE(out[r].second.size() == in[r].second.size());
    for (size_t c = 0; c < in[r].second.size(); ++c) {
      CHECK(out[r].second[c].first == in[r].second[c].first);
      double a = in[r].second[c].second, b = out[r].second[c].second;
      CHECK(((std::isnan(a) && std::isnan(b)) || a == b));  // bit-exact: shortest round-trip digits
    }
  }

  // A row cut short by a crash (no newline) is left out; a malformed one is an error with its line.
  std::ofstream(dir + "/metrics.csv", std::ios::app) << "3,0.95,0.2";
  CHECK(read_metrics_csv(dir + "/metrics.csv").size() == 3);
  std::ofstream(dir + "/bad.csv") << "epoch,loss\n0,1.5\n1,abc\n";
  CHECK_THROWS_WITH(read_metrics_csv(dir + "/bad.csv"), Catch::Contains("bad.csv:3") && Catch::Contains("abc"));
  CHECK_THROWS_WITH(read_metrics_csv(dir + "/absent.csv"), Catch::Contains("absent.csv"));
}

TEST_CASE("outputs: a full disk is an error naming the file, for both loggers") {
  if (!fs::exists("/dev/full")) TRAINER_SKIP(Permission, "no /dev/full on this system (a container without it)");
  MetricsLogger csv(MetricsLogger::Format::Csv, "/dev/full");
  CHECK_THROWS_WITH(csv.write(0, {{"loss", 1.0}}), Catch::Contains("/dev/full") && Catch::Contains("No space left"));
  MetricsLogger jsonl(MetricsLogger::Format::Jsonl, "/dev/full");
  CHECK_THROWS_WITH(jsonl.write(0, {{"loss", 1.0}}), Catch::Contains("/dev/full") && Catch::Contains("No space left"));
  CHECK_THROWS_WITH(MetricsLogger(MetricsLogger::Format::Csv, "/dev/full", {{0, {{"loss", 1.0}}}}), Catch::Contains("/dev/full"));
}
