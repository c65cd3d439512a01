// The console's epoch line and its parts, as Keras 3's progress bar (keras/src/utils/progbar.py) writes them.
#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>
#include <string>

#include "core/io/progress.h"

using trainer::Metrics;
using trainer::Progress;

namespace {

std::string bars(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "\u2501";
  return s;
}

}  // namespace

TEST_CASE("progress: metrics, times and the bar as Keras 3 formats them") {
  // 4 decimals; at or below 1e-3 in magnitude, 4 in exponent form (Progbar: abs(avg) > 1e-3).
  CHECK(Progress::format_metrics({{"accuracy", 0.54341}, {"loss", 1.31416}}) == " - accuracy: 0.5434 - loss: 1.3142");
  CHECK(Progress::format_metrics({{"loss", 0.0005}}) == " - loss: 5.0000e-04");
  CHECK(Progress::format_metrics({{"loss", 0.001}}) == " - loss: 1.0000e-03");
  CHECK(Progress::format_metrics({{"loss", -0.25}}) == " - loss: -0.2500");
  // _format_time: s at or above 1 s (and 0), ms, else us.
  CHECK(Progress::format_step_time(1.5) == "2s/step");
  CHECK(Progress::format_step_time(0) == "0s/step");
  CHECK(Progress::format_step_time(0.028) == "28ms/step");
  CHECK(Progress::format_step_time(0.0005) == "500us/step");
  // The ETA: 42s, 2:05, 1:02:03.
  CHECK(Progress::format_duration(42.7) == "42s");
  CHECK(Progress::format_duration(125) == "2:05");
  CHECK(Progress::format_duration(3723) == "1:02:03");
  // 20 cells; the count right-aligned to the total's width.
  CHECK(Progress::bar(7, 125, false) == "  7/125 " + bars(20));
  CHECK(Progress::bar(125, 125, false) == "125/125 " + bars(20));
  CHECK(Progress::bar(7, 125, true) == "\x1b[1m  7/125\x1b[0m \x1b[32m" + bars(1) + "\x1b[0m\x1b[37m" + bars(19) + "\x1b[0m");
  CHECK(Progress::bar(0, 0, false) == "0/0 " + bars(20));
}

TEST_CASE("progress: off a terminal each epoch is one line, the same in train.log") {
  std::FILE* out = std::tmpfile();
  std::FILE* log = std::tmpfile();
  REQUIRE(out);
  REQUIRE(log);
  Progress p(out, false);
  p.set_log(log);
  p.begin_epoch(2, 3, 10);
  for (int s = 1; s <= 10; ++s) p.update(s, {{"accuracy", 0.5}, {"loss", 1.25}});
  p.end_epoch({{"accuracy", 0.5}, {"loss", 1.25}, {"val_accuracy", 0.25}, {"val_loss", 2.0}});
  auto read = [](std::FILE* f) {
    std::rewind(f);
    std::string s;
    char buf[512];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  const std::string a = read(out), b = read(log);
  INFO(a);
  CHECK(std::regex_match(a, std::regex("Epoch 2/3 10/10 " + bars(20) +
                                       " 0s [0-9]+(s|ms|us)/step - accuracy: 0\\.5000 - loss: 1\\.2500 - val_accuracy: "
                                       "0\\.2500 - val_loss: 2\\.0000\n")));
  CHECK(a == b);
}
