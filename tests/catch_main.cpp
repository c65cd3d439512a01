// Catch2 v2 entry point shared by every test executable: runs the session, removes its scratch folders if it passed (test_dirs.h), and exits 77 (skipped) when a test recorded a skip and nothing failed (skip.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "skip.h"
#include "test_dirs.h"

namespace {

// Tells skip.cpp that a test case starts (its skip flag resets; its tags are known).
struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    trainer::test::detail::test_case_starting(info.tags);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv)) return rc;
  // Listing (CTest's discovery at build time) returns Catch's count, whatever the environment.
  const Catch::ConfigData& c = session.configData();
  const bool listing = c.listTests || c.listTestNamesOnly || c.listTags || c.listReporters;
  if (!listing && !trainer::test::detail::require_error().empty()) {
    std::cerr << trainer::test::detail::require_error() << "\n";
    return 1;
  }
  const int rc = session.run();
  trainer::test::detail::finish_test_dirs(rc == 0);
  return trainer::test::detail::exit_code(rc);
}
