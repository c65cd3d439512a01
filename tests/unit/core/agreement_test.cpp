// What processes of a job must agree on: the line naming the first difference, and one process.
#include <catch2/catch.hpp>

#include "core/dist/agreement.h"

using namespace trainer;

namespace {

std::vector<AgreedField> record(const std::string& size, const std::string& hash) {
  return {{"config hash", hash, 2, "same config"}, {"train set size", size, 3, "same data"}};
}

}  // namespace

TEST_CASE("agreement: the first differing field is named with each process's value and its code") {
  int code = 0;
  CHECK(disagreement({record("16", "a"), record("16", "a")}, &code).empty());
  CHECK(disagreement({record("16", "a"), record("12", "a")}, &code) ==
        "processes disagree: train set size 16 on process 0, 12 on process 1 (same data)");
  CHECK(code == 3);
  // The config, listed first, is named before the data it may explain.
  CHECK(disagreement({record("16", "a"), record("12", "b")}, &code) ==
        "processes disagree: config hash a on process 0, b on process 1 (same config)");
  CHECK(code == 2);
  // Processes with one value are listed together, runs as ranges.
  CHECK(disagreement({record("16", "a"), record("16", "a"), record("16", "a"), record("12", "a"), record("16", "a")}) ==
        "processes disagree: train set size 16 on processes 0-2, 4; 12 on process 3 (same data)");
}

TEST_CASE("agreement: a process alone (no MPI, or a world of one) has nothing to compare") {
  CHECK_NOTHROW(check_processes_agree(record("16", "a")));
  CHECK(disagreement({record("16", "a")}).empty());
}
