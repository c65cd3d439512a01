// scripts/gpu-check.sh without a GPU: --plan keeps every phase and command within the device tool's limits, and the dry run walks every phase in under a minute.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "cli.h"

namespace {

// Runs the script with `args`; its stdout (stderr folded in) and exit code.
e2e::Result gpu_check(const std::string& args, const std::string& out_dir) {
  const std::string build = std::filesystem::path(TRAINER_BINARY).parent_path().string();
  const std::string cmd = "cd '" TRAINER_SOURCE_DIR "' && OUT='" + out_dir + "' GPU_CHECK_LOGS='" + out_dir + "/logs' GPU_CHECK_BUILD='" + build +
                          "' scripts/gpu-check.sh " + args + " >'" + out_dir + "/stdout' 2>&1 </dev/null";
  const int st = std::system(cmd.c_str());
  e2e::Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = e2e::read_file(out_dir + "/stdout");
  return r;
}

}  // namespace

TEST_CASE("gpu-check: --plan bounds every phase by 540 s and every command by 570 s") {
  const std::string dir = e2e::temp_dir("gpu-plan");
  e2e::Result r = gpu_check("--plan", dir);
  INFO(r.out);
  REQUIRE(r.code == 0);  // the script exits 1 when a phase or a command is over its bound
  const std::regex phase_row(R"(\n  ([a-z0-9-]+) +([0-9]+)s +([0-9]+)s  )");
  int phases = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), phase_row); it != std::sregex_iterator(); ++it) {
    ++phases;
    CHECK(std::stoi((*it)[2]) <= 540);
    CHECK(std::stoi((*it)[3]) <= 120);
  }
  CHECK(phases >= 10);
  const std::regex command_row(R"(# bounds sum to +([0-9]+) s)");
  int commands = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), command_row); it != std::sregex_iterator(); ++it) {
    ++commands;
    CHECK(std::stoi((*it)[1]) + 30 <= 570);
  }
  CHECK(commands >= 3);
}

TEST_CASE("gpu-check: the dry run walks every phase, prints its rows and archives the logs, in under a minute") {
  const std::string dir = e2e::temp_dir("gpu-dry");
  const auto t0 = std::chrono::steady_clock::now();
  e2e::Result r = gpu_check("--dry-run all", dir);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out);
  CHECK(r.code == 0);  // non-zero: a binary, config, peer or test list the check needs is missing
  CHECK(secs < 60);
  CHECK(r.out.find("MISSING") == std::string::npos);
  for (const char* p : {"ops", "core", "engine", "graphs", "memcheck", "racecheck", "configs", "bench", "configs-mgn", "e2e",
                        "configs-mnv2", "bench-b64", "bench-mnv2"}) {
    INFO("phase " << p);
    CHECK(r.out.find(std::string("\nphase ") + p + " ") != std::string::npos);
  }
  CHECK(r.out.find("skipped: no GPU") != std::string::npos);
  CHECK(std::filesystem::exists(dir + "/gpu-check-logs.tar.gz"));
  CHECK(std::filesystem::exists(dir + "/gpu-check-summary.log"));
  CHECK(std::filesystem::exists(dir + "/logs/summary.log"));
  CHECK(!std::filesystem::exists(dir + "/gpu-check"));  // the logs stay out of $OUT (8 files come back)
  // With a pack, the script links /tmp/trainer-src to the checkout; run from under that link (as the
  // GPU machine's e2e phase runs this test), it once made the link point at itself.
  std::error_code ec;
  if (std::filesystem::is_symlink("/tmp/trainer-src", ec)) CHECK(std::filesystem::read_symlink("/tmp/trainer-src", ec) != "/tmp/trainer-src");
}

TEST_CASE("gpu-check: run-isolated starts no case past its deadline and counts the cases left as not run") {
  const std::string dir = e2e::temp_dir("isolated");
  const std::string tests = std::filesystem::path(TRAINER_BINARY).parent_path().string() + "/tests/unit_ops";
  auto run = [&](const std::string& opts) {
    const std::string cmd = "'" TRAINER_SOURCE_DIR "/scripts/run-isolated.sh' '" + tests + "' '" + dir + "/logs' " + opts +
                            " >'" + dir + "/out' 2>&1";
    const int st = std::system(cmd.c_str());
    e2e::Result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = e2e::read_file(dir + "/out");
    return r;
  };
  const std::string now = std::to_string(std::time(nullptr));
  e2e::Result late = run("--filter '^cuda policy' --deadline " + now);
  INFO(late.out);
  CHECK(late.code == 1);
  CHECK(late.out.find("0 passed, 0 skipped, 0 failed, ") != std::string::npos);
  CHECK(late.out.find(" not run (time bound)") != std::string::npos);
  e2e::Result ok = run("--filter '^cuda policy' --jobs 2 --timeout 60 --deadline " + std::to_string(std::time(nullptr) + 120));
  INFO(ok.out);
  CHECK(ok.code == 0);
  CHECK(ok.out.find(" 0 failed (") != std::string::npos);
  e2e::Result listed = run("--filter '^cuda policy' --shard 1/2 --list");
  CHECK(listed.code == 0);
  CHECK(listed.out == "1 cases\n");
}
