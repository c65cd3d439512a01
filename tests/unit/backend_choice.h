// Which backends a [backends] test case runs on in this process: TRAINER_TEST_BACKEND=cpu or cuda (CTest's two entries of such a case), every backend present when unset.
//
// A test case that runs once per backend (ops/backends.h's backends() and lows(), core/
// test_devices.h's test_devices() and mixed_cases()) is tagged [backends]; tests/CMakeLists.txt
// registers it twice: "<name>" with TRAINER_TEST_BACKEND=cpu and "<name> (cuda)" with
// TRAINER_TEST_BACKEND=cuda. So the CPU part and the CUDA part pass, fail or skip on their own:
// where no GPU can run, "<name> (cuda)" is skipped (Missing::Gpu) and "<name>" still passes or
// fails on the CPU. Unset (a test binary run by hand, scripts/run-isolated.sh on the GPU machine),
// every backend present runs, and one that cannot run here is recorded as a skip.
// Test cases for the GPU alone (backends.h's gpu_backend(), test_devices.h's test_gpu()) are not
// tagged and ignore the variable: they have one entry, skipped where no GPU can run.
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "skip.h"

namespace trainer::test {

struct BackendChoice {
  bool cpu = true;
  bool cuda = true;
};

// TRAINER_TEST_BACKEND, for a test case tagged [backends] (an untagged one that asks fails: its
// CUDA part would have no CTest entry).
inline BackendChoice backend_choice() {
  if (!case_has_tag("backends"))
    FAIL("this test case runs once per backend: tag it [backends], so that its CUDA part is a CTest entry of its own "
         "(tests/unit/backend_choice.h)");
  const char* v = std::getenv("TRAINER_TEST_BACKEND");
  const std::string s = v ? v : "";
  if (s.empty()) return {true, true};
  if (s == "cpu") return {true, false};
  if (s == "cuda") return {false, true};
  FAIL("TRAINER_TEST_BACKEND must be cpu or cuda (or unset: both), not '" << s << "'");
  return {};
}

}  // namespace trainer::test
