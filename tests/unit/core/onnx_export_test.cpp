// The ONNX exporter's registry covers every layer type the graph knows, and LayerConfig (a layer's
// configuration as plain values, what the exporters read) refuses a missing or mistyped key.
#include <catch2/catch.hpp>

#include "core/export/onnx_export.h"
#include "core/export/registry.h"
#include "core/graph/layer.h"

using namespace trainer;

TEST_CASE("onnx export: every registered layer type has an exporter") {
  REQUIRE(!layer_types().empty());
  for (const std::string& type : layer_types()) {
    INFO("layer type '" << type << "' has no ONNX exporter (core/export/layers/*.cpp)");
    CHECK(onnx_export::find_exporter(type) != nullptr);
  }
}

TEST_CASE("onnx export: the IR version that goes with each opset written") {
  CHECK(kOnnxMinOpset <= kOnnxDefaultOpset);
  CHECK(kOnnxDefaultOpset <= kOnnxMaxOpset);
  CHECK(onnx_ir_version(13) == 7);
  CHECK(onnx_ir_version(14) == 7);
  CHECK(onnx_ir_version(15) == 8);
  CHECK(onnx_ir_version(17) == 8);
}

TEST_CASE("LayerConfig: typed values — a missing or mistyped key is a logic_error naming it") {
  LayerConfig c;
  c.put_int("filters", 16).put_real("epsilon", 1e-3).put_text("padding", "same").put_int("use_bias", 0);
  CHECK(c.integer("filters") == 16);
  CHECK(c.real("epsilon") == 1e-3);
  CHECK(c.text("padding") == "same");
  CHECK_FALSE(c.flag("use_bias"));
  CHECK(c.has("filters"));
  CHECK_FALSE(c.has("units"));
  CHECK_THROWS_WITH(c.integer("units"), "layer description has no 'units'");
  CHECK_THROWS_WITH(c.real("filters"), "layer description's 'filters' is not a number");
  CHECK_THROWS_WITH(c.text("epsilon"), "layer description's 'epsilon' is not a text");
}
