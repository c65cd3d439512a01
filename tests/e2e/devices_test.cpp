// `trainer devices`: the CPU lines, and each GPU or the reason none is visible; --json.
#include <catch2/catch.hpp>
#include <sched.h>

#include <string>

#include "cli.h"

TEST_CASE("e2e devices: CPU cores and ISA, then GPUs or why there are none") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::string cores = std::to_string(CPU_COUNT(&set));
  auto r = e2e::trainer("devices");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("cpu: " + cores + " logical cores"));
  CHECK_THAT(r.out, Catch::Contains("oneDNN ISA ") && Catch::Contains("AVX-512 ") && Catch::Contains("AMX "));
  bool gpus = r.out.find("\ncuda:0: ") != std::string::npos;
  if (!gpus) {
    auto at = r.out.find("cuda: no GPU visible (");
    REQUIRE(at != std::string::npos);
    CHECK(r.out.compare(at + 22, 2, ")\n") != 0);  // a reason is given
  }

  auto j = e2e::trainer("devices --json");
  INFO(j.out << j.err);
  REQUIRE(j.code == 0);
  CHECK(j.out.find('\n') == j.out.size() - 1);  // one line
  const nlohmann::json d = e2e::last_json(j.out);
  CHECK(d["cpu"]["logical_cores"] == std::stoi(cores));
  if (gpus)
    CHECK(d["no_gpu_reason"].is_null());
  else
    CHECK((d["gpus"].empty() && d["no_gpu_reason"].is_string()));
}
