// subtract, average, maximum, minimum, prelu, rescaling and permute layers (Keras Subtract, Average, Maximum, Minimum, PReLU, Rescaling, Permute): shapes, Keras's names, weights, config errors at file:line:col.
#include <catch2/catch.hpp>

#include "graph_test_util.h"

using namespace trainer;
using trainer::test::build;
using trainer::test::error_of;

namespace {

// Three branches a, b, c of [5, 4] from one input, then `merge` over `inputs`.
std::string merged(const std::string& merge, const std::string& inputs = "[a, b]") {
  return "model:\n  input: [5, 3]\n  layers:\n"
         "    - {name: a, type: dense, units: 4}\n"
         "    - {name: b, type: dense, units: 4, inputs: [input]}\n"
         "    - {name: c, type: dense, units: 4, inputs: [input]}\n"
         "    - {name: m, type: " + merge + ", inputs: " + inputs + "}\n";
}

}  // namespace

TEST_CASE("subtract, average, maximum, minimum: Keras's names, the inputs' shape, errors at file:line:col") {
  for (const char* t : {"subtract", "average", "maximum", "minimum"}) {
    INFO(t);
    CHECK(build(merged(t)).output_shape() == Shape{5, 4});
  }
  CHECK(find_layer("subtract")->keras_name == "Subtract");
  CHECK(find_layer("average")->keras_name == "Average");
  CHECK(find_layer("maximum")->keras_name == "Maximum");
  CHECK(find_layer("minimum")->keras_name == "Minimum");
  for (const char* t : {"average", "maximum", "minimum"}) CHECK(build(merged(t, "[a, b, c]")).output_shape() == Shape{5, 4});
  CHECK_THAT(error_of(merged("subtract", "[a, b, c]")), Catch::StartsWith("test.yaml:7:7:") && Catch::Contains("2"));
  CHECK_THAT(error_of(merged("maximum", "[a]")), Catch::StartsWith("test.yaml:7:7:"));
  const std::string odd = "model:\n  input: [5, 3]\n  layers:\n    - {name: a, type: dense, units: 4}\n"
                          "    - {name: b, type: dense, units: 2, inputs: [input]}\n"
                          "    - {name: m, type: average, inputs: [a, b]}\n";
  CHECK_THAT(error_of(odd), Catch::StartsWith("test.yaml:6:7:") && Catch::Contains("average 'm': input shapes 5x4 and 5x2 differ"));
  CHECK_THAT(error_of(merged("minimum, axis: 1")), Catch::StartsWith("test.yaml:7:") && Catch::Contains("unknown key 'axis'"));
}

TEST_CASE("prelu: alpha of a sample's shape with 1 on each shared axis, zeros by default, Keras's name") {
  auto alpha = [](const std::string& layer, const std::string& input) {
    const Graph g = build("model:\n  input: " + input + "\n  layers:\n    - {name: p, type: prelu" + layer + "}\n");
    REQUIRE(g.params().entries().size() == 1);
    CHECK(g.params().entries()[0].name == "p/alpha");
    CHECK(g.output_shape() == g.nodes()[0].shape);
    return g.params().entries()[0].spec.shape;
  };
  CHECK(alpha("", "[6, 5, 3]") == Shape{6, 5, 3});
  CHECK(alpha(", shared_axes: [1, 2]", "[6, 5, 3]") == Shape{1, 1, 3});
  CHECK(alpha(", shared_axes: 3", "[6, 5, 3]") == Shape{6, 5, 1});
  CHECK(alpha(", shared_axes: [2]", "[6, 5, 3]") == Shape{6, 1, 3});
  CHECK(alpha(", shared_axes: [1]", "[7, 4]") == Shape{1, 4});
  CHECK(alpha("", "[9]") == Shape{9});
  CHECK(find_layer("prelu")->keras_name == "PReLU");
  const Graph g = build("model:\n  input: [4, 4, 2]\n  layers:\n    - {name: p, type: prelu, shared_axes: [1, 2]}\n");
  CHECK(g.params().entries()[0].spec.init.kind == InitKind::Zeros);
  const Graph c = build("model:\n  input: [4, 4, 2]\n  layers:\n    - {name: p, type: prelu, alpha_initializer: "
                        "{type: constant, value: 0.25}}\n");
  CHECK(c.params().entries()[0].spec.init.kind == InitKind::Constant);
  CHECK(g.nodes()[0].layer->describe().text("shared_axes") == "1,2");
}

TEST_CASE("prelu: config errors at file:line:col") {
  const std::string head = "model:\n  input: [6, 5, 3]\n  layers:\n    - {name: p, type: prelu, ";
  CHECK_THAT(error_of(head + "shared_axes: [1, 4]}\n"),
             Catch::StartsWith("test.yaml:4:47:") && Catch::Contains("shared axis 4 is not an axis of its input (None, 6, 5, 3)"));
  CHECK_THAT(error_of(head + "shared_axes: [0]}\n"), Catch::StartsWith("test.yaml:4:44:") && Catch::Contains("the batch being 0"));
  CHECK_THAT(error_of(head + "shared_axes: [2, 2]}\n"), Catch::StartsWith("test.yaml:4:47:") && Catch::Contains("given twice"));
  CHECK_THAT(error_of(head + "shared_axes: [x]}\n"), Catch::StartsWith("test.yaml:4:44:") && Catch::Contains("integer"));
  CHECK_THAT(error_of(head + "alpha_initializer: onez}\n"), Catch::StartsWith("test.yaml:4:") && Catch::Contains("ones"));
  CHECK_THAT(error_of(head + "alpha_regularizer: l2}\n"), Catch::StartsWith("test.yaml:4:") && Catch::Contains("unknown key"));
}

TEST_CASE("rescaling: Keras's name, no weights, the input's shape, config errors at file:line:col") {
  const Graph g = build("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: r, type: rescaling, scale: 0.00392156862745098}\n");
  CHECK(g.output_shape() == Shape{8, 8, 3});
  CHECK(g.params().entries().empty());
  CHECK(find_layer("rescaling")->keras_name == "Rescaling");
  const LayerConfig c = build("model:\n  input: [8, 8, 3]\n  layers:\n    - {name: r, type: rescaling, scale: [1, 2, 3], offset: -1}\n")
                            .nodes()[0].layer->describe();
  CHECK(c.integer("channels") == 3);
  CHECK(c.real("scale_2") == 3.0);
  CHECK(c.real("offset_1") == -1.0);
  const std::string head = "model:\n  input: [8, 8, 3]\n  layers:\n    - {name: r, type: rescaling";
  CHECK_THAT(error_of(head + "}\n"), Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'scale'"));
  CHECK_THAT(error_of(head + ", scale: [1, 2]}\n"),
             Catch::StartsWith("test.yaml:4:41:") && Catch::Contains("2 values per channel, but its input (None, 8, 8, 3) has 3 channels"));
  CHECK_THAT(error_of(head + ", scale: [1, 2, 3], offset: [1, 2]}\n"),
             Catch::StartsWith("test.yaml:4:60:") && Catch::Contains("2 offsets for 3 scales"));
  CHECK_THAT(error_of(head + ", scale: x}\n"), Catch::StartsWith("test.yaml:4:41:") && Catch::Contains("number"));
  CHECK_THAT(error_of(head + ", scale: 1e39}\n"), Catch::StartsWith("test.yaml:4:41:") && Catch::Contains("finite"));
}

TEST_CASE("permute: Keras's dims from 1, the output's shape, no weights, config errors at file:line:col") {
  CHECK(build("model:\n  input: [7, 3]\n  layers:\n    - {name: p, type: permute, dims: [2, 1]}\n").output_shape() == Shape{3, 7});
  CHECK(build("model:\n  input: [4, 5, 6]\n  layers:\n    - {name: p, type: permute, dims: [3, 1, 2]}\n").output_shape() ==
        Shape{6, 4, 5});
  CHECK(build("model:\n  input: [4, 5, 6]\n  layers:\n    - {name: p, type: permute, dims: [3, 1, 2]}\n").params().entries().empty());
  CHECK(find_layer("permute")->keras_name == "Permute");
  const std::string head = "model:\n  input: [7, 3]\n  layers:\n    - {name: p, type: permute";
  CHECK_THAT(error_of(head + "}\n"), Catch::StartsWith("test.yaml:4:7:") && Catch::Contains("'dims'"));
  CHECK_THAT(error_of(head + ", dims: [1, 1]}\n"),
             Catch::StartsWith("test.yaml:4:38:") && Catch::Contains("each axis of its input (None, 7, 3) once, numbered 1 to 2"));
  CHECK_THAT(error_of(head + ", dims: [0, 1]}\n"), Catch::StartsWith("test.yaml:4:38:") && Catch::Contains("the batch being 0"));
  CHECK_THAT(error_of(head + ", dims: [2, 1, 3]}\n"), Catch::StartsWith("test.yaml:4:38:"));
}
