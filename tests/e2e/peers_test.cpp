// The PyTorch peers on the CPU: --cudnn-benchmark and --compile-mode are taken, the variant and the warm-up (compile) time are reported apart from the throughput, and a PyTorch without torch.compile says so in one line.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "cli.h"

using Catch::Contains;

namespace {

// e2e::python() <script> <args> from the repository root: its stdout and stderr, its exit code.
e2e::Result python(const std::string& script_and_args) {
  const std::string dir = e2e::temp_dir("peers");
  const std::string cmd = "cd '" TRAINER_SOURCE_DIR "' && " + e2e::python() + " " + script_and_args + " >'" + dir + "/out' 2>'" +
                          dir + "/err' </dev/null";
  const int st = std::system(cmd.c_str());
  e2e::Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = e2e::read_file(dir + "/out");
  r.err = e2e::read_file(dir + "/err");
  return r;
}

const std::string kTiny = " --batch 4 --steps 1 --warmup 1 --threads 1";

}  // namespace

TEST_CASE("peers: --cudnn-benchmark and --compile-mode are taken, the variant and the warm-up reported apart") {
  if (e2e::skip_without_python({{"torch", "python3-torch"}})) return;
  auto eager = python("scripts/peers/minigooglenet_torch.py" + kTiny + " --channels-last");
  INFO(eager.out << eager.err);
  REQUIRE(eager.code == 0);
  nlohmann::json j = e2e::last_json(eager.out);
  CHECK(j["variant"] == "eager");
  CHECK(j["batch"] == 4);
  CHECK(j["images_per_s"].get<double>() > 0);
  CHECK(j["warmup_seconds"].get<double>() > 0);  // timed apart: a compiled variant's compile lands here
  auto bench = python("scripts/peers/minigooglenet_torch.py" + kTiny + " --cudnn-benchmark");
  INFO(bench.out << bench.err);
  REQUIRE(bench.code == 0);
  CHECK(e2e::last_json(bench.out)["variant"] == "eager + cudnn.benchmark");
  // torch.compile: Debian 12's PyTorch 1.13 has none, and says so; a PyTorch 2 compiles (not run
  // here: minutes on a CPU).
  const bool has_compile = std::system((e2e::python() + " -c 'import sys, torch; sys.exit(not hasattr(torch, \"compile\"))'").c_str()) == 0;
  if (!has_compile) {
    auto c = python("scripts/peers/minigooglenet_torch.py" + kTiny + " --compile-mode reduce-overhead");
    CHECK(c.code == 1);
    CHECK_THAT(c.err, Contains("has no torch.compile") && Contains("--compile-mode reduce-overhead needs PyTorch 2.x"));
  }
  auto bad = python("scripts/peers/minigooglenet_torch.py --compile-mode fastest");
  CHECK(bad.code == 2);  // argparse: not one of the modes
  CHECK_THAT(bad.err, Contains("invalid choice: 'fastest'"));
  // The MobileNetV2 peer (torchvision, which scripts/bench-vs-pytorch.sh installs for it) shares the
  // same options: it compiles.
  auto syntax = python("-m py_compile scripts/peers/mobilenetv2_torch.py scripts/peers/peer_common.py");
  CHECK(syntax.code == 0);
}

TEST_CASE("peers: the GPT peer trains a step on byte windows and reports tokens/s") {
  if (e2e::skip_without_python({{"torch", "python3-torch"}})) return;
  auto r = python("scripts/peers/gpt_torch.py" + kTiny + " --layers 1 --width 16 --heads 2 --block 8");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  nlohmann::json j = e2e::last_json(r.out);
  CHECK(j["model"] == "gpt_bytes");
  CHECK(j["batch"] == 4);
  CHECK(j["tokens_per_s"].get<double>() > 0);
}
