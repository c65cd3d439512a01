// group_norm layer (Keras GroupNormalization): gamma and beta per channel, Keras's name and defaults, config errors at file:line:col.
#include <catch2/catch.hpp>

#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

TEST_CASE("group_norm: gamma and beta per channel, groups 32 and epsilon 1e-3 by default, Keras's name") {
  const Graph g = build("model:\n  input: [6, 5, 64]\n  layers:\n    - {name: gn, type: group_norm}\n");
  CHECK(g.output_shape() == Shape{6, 5, 64});
  REQUIRE(g.params().entries().size() == 2);
  CHECK(g.params().entries()[0].name == "gn/gamma");
  CHECK(g.params().entries()[0].spec.shape == Shape{64});
  CHECK(g.params().entries()[0].spec.init.kind == InitKind::Ones);
  CHECK(g.params().entries()[1].name == "gn/beta");
  CHECK(g.params().entries()[1].spec.init.kind == InitKind::Zeros);
  const LayerConfig c = g.nodes()[0].layer->describe();
  CHECK(c.integer("groups") == 32);
  CHECK(c.real("epsilon") == Approx(1e-3));
  CHECK(find_layer("group_norm")->keras_name == "GroupNormalization");
  CHECK(build("model:\n  input: [7, 6]\n  layers:\n    - {type: group_norm, groups: 3, center: false}\n")
            .params().entries().size() == 1);
  CHECK(build("model:\n  input: [6]\n  layers:\n    - {type: group_norm, groups: 6, scale: false, center: false}\n")
            .params().entries().empty());
}

TEST_CASE("group_norm: config errors at file:line:col") {
  CHECK_THAT(error_of("model:\n  input: [4, 4, 6]\n  layers:\n    - {name: gn, type: group_norm, groups: 4}\n"),
             Catch::StartsWith("test.yaml:4:44:") && Catch::Contains("6 channels cannot be split into 4 groups"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 6]\n  layers:\n    - {name: gn, type: group_norm}\n"),
             Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("Keras's default is 32 groups"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 8]\n  layers:\n    - {name: gn, type: group_norm, groups: 0}\n"),
             Catch::StartsWith("test.yaml:4:44:") && Catch::Contains("between 1 and"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 8]\n  layers:\n    - {name: gn, type: group_norm, groups: 4, axis: 1}\n"),
             Catch::StartsWith("test.yaml:4:53:") && Catch::Contains("axis must be -1"));
  CHECK_THAT(error_of("model:\n  input: [4, 4, 8]\n  layers:\n    - {name: gn, type: group_norm, group: 4}\n"),
             Catch::StartsWith("test.yaml:4:") && Catch::Contains("did you mean 'groups'"));
}
