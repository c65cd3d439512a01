// The skip record behind TRAINER_SKIP (skip.h): its kinds, strict mode (TRAINER_TEST_REQUIRE), the exit code, the running test case's tags.
#include "skip.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace trainer::test {
namespace {

constexpr Missing kAll[] = {Missing::Gpu, Missing::CpuFeature, Missing::Package, Missing::Data, Missing::Permission};

bool g_case_skipped = false;  // since the running test case started
bool g_any_skipped = false;   // in this process: its exit code
std::vector<std::string> g_case_tags;
std::set<std::string> g_case_lines;  // printed once per test case (its sections run it again)

// Lower case, without '-' and '_': "CpuFeature", "cpu-feature" and "cpu_feature" are one name.
std::string folded(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_' && !std::isspace(static_cast<unsigned char>(c)))
      out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Required {
  bool kinds[std::size(kAll)] = {};
  std::string error;
};

// TRAINER_TEST_REQUIRE, read once: a comma list of kinds.
const Required& required() {
  static const Required r = [] {
    Required out;
    const char* env = std::getenv("TRAINER_TEST_REQUIRE");
    std::string rest = env ? env : "";
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string item = folded(rest.substr(0, comma));
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      if (item.empty()) continue;
      bool known = false;
      for (size_t i = 0; i < std::size(kAll); ++i)
        if (item == folded(missing_name(kAll[i]))) out.kinds[i] = known = true;
      if (!known) {
        out.error = "TRAINER_TEST_REQUIRE: unknown kind '" + item + "' (the kinds: ";
        for (size_t i = 0; i < std::size(kAll); ++i) out.error += std::string(i ? ", " : "") + missing_name(kAll[i]);
        out.error += ")";
      }
    }
    return out;
  }();
  return r;
}

// A Catch2 message (WARN, or FAIL which throws) at the caller's file and line, as those macros
// make at theirs.
void message(Catch::ResultWas::OfType type, const std::string& text, const char* file, int line) {
  Catch::AssertionHandler handler(type == Catch::ResultWas::Warning ? "WARN" : "FAIL",
                                  Catch::SourceLineInfo(file, std::size_t(line)), Catch::StringRef(),
                                  type == Catch::ResultWas::Warning ? Catch::ResultDisposition::ContinueOnFailure
                                                                    : Catch::ResultDisposition::Normal);
  handler.handleMessage(type, text);
  handler.complete();
}

}  // namespace

const char* missing_name(Missing kind) {
  switch (kind) {
    case Missing::Gpu: return "gpu";
    case Missing::CpuFeature: return "cpu-feature";
    case Missing::Package: return "package";
    case Missing::Data: return "data";
    case Missing::Permission: return "permission";
  }
  return "?";
}

void record_skip(Missing kind, const std::string& reason, const char* file, int line) {
  std::string text = std::string("SKIPPED (") + missing_name(kind) + "): " + reason;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (required().kinds[size_t(kind)])
    message(Catch::ResultWas::ExplicitFailure,
            text + " \xe2\x80\x94 must run here: TRAINER_TEST_REQUIRE lists " + missing_name(kind), file, line);
  if (g_case_lines.insert(text).second) message(Catch::ResultWas::Warning, text, file, line);
  g_case_skipped = g_any_skipped = true;
}

bool skipped() { return g_case_skipped; }

bool case_has_tag(const std::string& tag) {
  return std::find(g_case_tags.begin(), g_case_tags.end(), tag) != g_case_tags.end();
}

namespace detail {

int exit_code(int catch_result) {
  // A failure wins over any skip; a failure count that happens to read as the skip code is 1.
  if (catch_result != 0) return catch_result == kSkipExitCode ? 1 : catch_result;
  return g_any_skipped ? kSkipExitCode : 0;
}

void test_case_starting(const std::vector<std::string>& tags) {
  g_case_skipped = false;
  g_case_tags = tags;
  g_case_lines.clear();
}

std::string require_error() { return required().error; }

}  // namespace detail
}  // namespace trainer::test
