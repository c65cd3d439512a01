// Skipped tests: TRAINER_SKIP(Kind, message) records why a test cannot run here; the process then exits 77, which CTest shows as "Skipped".
//
// Catch2 v2 has no SKIP. A test that finds something missing calls
//
//   TRAINER_SKIP(Package, "/usr/bin/python3 cannot import onnx (Debian: python3-onnx)");
//
// which prints a Catch2 warning "SKIPPED (package): <reason>", records the skip and returns from
// the enclosing function (a TEST_CASE body or a void helper). tests/catch_main.cpp's main then
// exits 77 (CTest's SKIP_RETURN_CODE: "Not Run", "Skipped") when nothing failed, and Catch's own
// non-zero code when an assertion failed, before or after the skip: a skip never hides a failure.
// A helper that skips makes its caller stop too: the caller tests skipped() after the call, or
// the helper returns a bool (record_skip() records without returning).
//
// Strict mode: TRAINER_TEST_REQUIRE=<kind>[,<kind>...] (e.g. "package" in CI, whose setup installs
// every package) turns a skip of a listed kind into a failure: "... must run here:
// TRAINER_TEST_REQUIRE lists package".
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace trainer::test {

// What a skipped test lacks.
enum class Missing {
  Gpu,         // no GPU visible, or CUDA not built in
  CpuFeature,  // an instruction set oneDNN or our kernels need (AVX-512, AVX512_BF16)
  Package,     // a Debian package scripts/setup.sh installs (python3-torch, numpy, onnx, openmpi-bin ...)
  Data,        // the CIFAR tarballs of ../shared/data (TRAINER_DATA)
  Permission,  // something the machine does not allow or provide (a tmpfs or read-only bind mount, /dev/full)
};

// "gpu", "cpu-feature", "package", "data", "permission": the names in messages and in
// TRAINER_TEST_REQUIRE (which also accepts them in any case, with '_' for '-' or without it).
const char* missing_name(Missing kind);

// Records a skip of the running test case and prints "SKIPPED (<kind>): <reason>" (a Catch2
// warning at the caller's line, once per test case); under TRAINER_TEST_REQUIRE listing `kind` it
// fails instead (throws out of the test case, as FAIL). (The caller's place through GCC's and
// clang's __builtin_FILE/LINE: clang 14, the sanitizer build's, has no std::source_location.)
void record_skip(Missing kind, const std::string& reason, const char* file = __builtin_FILE(), int line = __builtin_LINE());

// Whether the running test case recorded a skip (reset as each test case starts).
bool skipped();

// Whether the running test case has the tag (without brackets: "backends").
bool case_has_tag(const std::string& tag);

// The exit code CTest reads as a skip (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

namespace detail {
// For tests/catch_main.cpp: the process's exit code given Catch2's; a new test case starting;
// whether TRAINER_TEST_REQUIRE is well formed ("", else why not).
int exit_code(int catch_result);
void test_case_starting(const std::vector<std::string>& tags);
std::string require_error();
}  // namespace detail

}  // namespace trainer::test

// Records the skip (the message is streamed, as Catch2's INFO) and returns from the enclosing
// void function.
#define TRAINER_SKIP(kind, message)                                                      \
  do {                                                                                   \
    std::ostringstream trainer_skip_reason_;                                             \
    trainer_skip_reason_ << message;                                                     \
    ::trainer::test::record_skip(::trainer::test::Missing::kind, trainer_skip_reason_.str()); \
    return;                                                                              \
  } while (false)
