// TRAINER_FAST_PATHS' grammar: the default set (every fast path but dw_tiled and conv_1x1_gemm, not yet run on a GPU; attn_cudnn included since its GPU run), names on and off, "all", "default", "none", and the names it prints.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "core/ops/fast_paths.h"

using namespace trainer;

TEST_CASE("fast paths: the default set is every path but dw_tiled and conv_1x1_gemm (attn_cudnn included), a spec starts from it, all/default/none reset it") {
  const FastPaths d = FastPaths::defaults();
  CHECK(d.has(FastPath::AttnCudnn));
  CHECK_FALSE(d.has(FastPath::DwTiled));
  CHECK_FALSE(d.has(FastPath::Conv1x1Gemm));
  CHECK(d.with(FastPath::DwTiled, true).with(FastPath::Conv1x1Gemm, true) == FastPaths::all());
  CHECK(FastPaths::parse("dw_tiled,conv_1x1_gemm") == FastPaths::all());
  CHECK(FastPaths::parse("all,-dw_tiled,-conv_1x1_gemm").str() == "default");
  CHECK(FastPaths::parse("dw_tiled").has(FastPath::DwTiled));
  CHECK_FALSE(FastPaths::parse("dw_tiled").has(FastPath::Conv1x1Gemm));
  CHECK(d.has(FastPath::AttnGemm));
  CHECK(d.has(FastPath::ConvWgrad));
  CHECK(d.str() == "default");
  CHECK(FastPaths::parse("") == d);
  CHECK(FastPaths::parse("-attn_cudnn") == d.with(FastPath::AttnCudnn, false));
  CHECK(FastPaths::parse("-attn_cudnn").str() != "default");
  CHECK(FastPaths::parse("-attn_gemm") == d.with(FastPath::AttnGemm, false));
  CHECK(FastPaths::parse("all") == FastPaths::all());
  CHECK(FastPaths::all().has(FastPath::AttnCudnn));
  CHECK(FastPaths::all().str() == "all");
  CHECK(FastPaths::parse("none,default") == d);
  CHECK(FastPaths::parse("none, conv_wgrad") == FastPaths::none().with(FastPath::ConvWgrad, true));
  CHECK(FastPaths::parse("none").str() == "none");
  CHECK(FastPaths::none().with(FastPath::Gelu, true).with(FastPath::AttnCudnn, true).str() == "gelu,attn_cudnn");
  CHECK_THROWS_AS(FastPaths::parse("attn_flash"), std::invalid_argument);
  try {
    FastPaths::parse("attn_flash");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("attn_cudnn") != std::string::npos);  // the known names are listed
  }
}
