// TRAINER_FAST_PATHS' grammar: the default set (every fast path, attn_cudnn included since its GPU run), names on and off, "all", "default", "none", and the names it prints.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "core/ops/fast_paths.h"

using namespace trainer;

TEST_CASE("fast paths: the default set is every path (attn_cudnn included), a spec starts from it, all/default/none reset it") {
  const FastPaths d = FastPaths::defaults();
  CHECK(d.has(FastPath::AttnCudnn));
  CHECK(d == FastPaths::all());
  CHECK(d.has(FastPath::AttnGemm));
  CHECK(d.has(FastPath::ConvWgrad));
  CHECK(d.str() == "default");
  CHECK(FastPaths::parse("") == d);
  CHECK(FastPaths::parse("-attn_cudnn") == d.with(FastPath::AttnCudnn, false));
  CHECK(FastPaths::parse("-attn_cudnn").str() != "default");
  CHECK(FastPaths::parse("-attn_gemm") == d.with(FastPath::AttnGemm, false));
  CHECK(FastPaths::parse("all") == FastPaths::all());
  CHECK(FastPaths::all().has(FastPath::AttnCudnn));
  CHECK(FastPaths::all().str() == "default");  // the same set: its name as the default
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
