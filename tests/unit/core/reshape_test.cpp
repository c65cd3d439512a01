// reshape layer (Keras Reshape): target shapes with -1, the values passed through in order (forward and backward), and its config errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "graph_run.h"
#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {

std::string model(const std::string& input, const std::string& layers) {
  return "model:\n  input: " + input + "\n  layers:\n" + layers;
}

}  // namespace

TEST_CASE("reshape: Keras's target shapes (one -1 inferred) between images, sequences and flat vectors") {
  struct Want {
    const char *input, *target;
    Shape out;
  };
  for (const Want& w : {Want{"[4, 6, 2]", "[8, 6]", Shape{8, 6}}, Want{"[48]", "[4, 4, 3]", Shape{4, 4, 3}},
                        Want{"[4, 6, 2]", "[-1, 3]", Shape{16, 3}}, Want{"[4, 6, 2]", "[2, -1, 4]", Shape{2, 6, 4}},
                        Want{"[12, 4]", "[-1]", Shape{48}}, Want{"[5]", "[5]", Shape{5}}}) {
    INFO(w.input << " -> " << w.target);
    Graph g = build(model(w.input, std::string("    - {name: r, type: reshape, target_shape: ") + w.target + "}\n"));
    CHECK(g.output_shape() == w.out);
    CHECK(find_layer("reshape")->keras_name == "Reshape");
  }
  const std::string in = "model:\n  input: [4, 6, 2]\n  layers:\n    - {type: reshape, target_shape: ";
  CHECK_THAT(error_of(in + "[5, -1]}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("holds 48 values per sample, which target_shape [5, -1] cannot hold"));
  CHECK_THAT(error_of(in + "[7, 7]}\n"), Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("cannot hold"));
  CHECK_THAT(error_of(in + "[-1, -1]}\n"), Catch::StartsWith("test.yaml:4:42:") && Catch::Contains("only one target dimension may be -1"));
  CHECK_THAT(error_of(in + "[0, 48]}\n"), Catch::StartsWith("test.yaml:4:38:") && Catch::Contains("positive, or -1"));
  CHECK_THAT(error_of(in + "[1, 2, 3, 8]}\n"), Catch::StartsWith("test.yaml:4:37:") && Catch::Contains("1 to 3 dimensions"));
  CHECK_THAT(error_of(in + "48}\n"), Catch::StartsWith("test.yaml:4:37:") && Catch::Contains("1 to 3 dimensions"));
  CHECK_THAT(error_of(in + "[1099511627776, 1099511627776]}\n"), Catch::Contains("cannot hold"));  // no overflow
}

TEST_CASE("reshape: forward passes the values in order, backward the gradient, and a reshaped image feeds a conv2d") {
  trainer::test::Probe p(model("[12]", "    - {name: d, type: dense, units: 32}\n"
                                       "    - {name: r, type: reshape, target_shape: [4, -1, 2]}\n"
                                       "    - {name: c, type: conv2d, filters: 3, kernel: 2}\n"
                                       "    - {name: s, type: reshape, target_shape: [-1, 3]}\n"),
                         Shape{2, 12});
  CHECK(p.ex->graph().output_shape() == Shape{9, 3});
  CHECK(p.out("r").shape() == Shape{2, 4, 4, 2});
  CHECK(std::memcmp(p.out("r").data(), p.out("d").data(), p.out("d").bytes()) == 0);
  CHECK(std::memcmp(p.out("s").data(), p.out("c").data(), p.out("c").bytes()) == 0);
  p.backward("s", "c");
  CHECK(p.grad_at == p.dy);
}
