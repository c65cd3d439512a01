// configs/ holds exactly the configs docs/configs.md lists (no stray files such as fuzzing corpora), and each one loads.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "cli.h"

namespace fs = std::filesystem;

namespace {

const fs::path kConfigs = fs::path(TRAINER_SOURCE_DIR) / "configs";

// The files docs/configs.md names in its table ("| `bench/cifar10.yaml` | ..."), relative to configs/.
std::set<std::string> documented() {
  std::set<std::string> out;
  const std::string text = e2e::read_file((fs::path(TRAINER_SOURCE_DIR) / "docs" / "configs.md").string());
  const std::regex row(R"(^\| `([^`]+)` \|)", std::regex::multiline);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

// Every file under configs/, relative to it.
std::set<std::string> present() {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(kConfigs))
    if (!e.is_directory())
      out.insert(fs::relative(e.path(), kConfigs).generic_string());
  return out;
}

}  // namespace

TEST_CASE("configs: the folder holds exactly the configs docs/configs.md lists") {
  const std::set<std::string> docs = documented(), files = present();
  REQUIRE(docs.size() >= 6);  // the table was read
  for (const std::string& f : files) {
    INFO("configs/" << f << " is not listed in docs/configs.md (only documented configs belong here)");
    CHECK(docs.count(f) == 1);
    CHECK(fs::path(f).extension() == ".yaml");
  }
  for (const std::string& d : docs) {
    INFO("docs/configs.md lists configs/" << d << ", which does not exist");
    CHECK(files.count(d) == 1);
  }
}

TEST_CASE("configs: every shipped config loads (trainer summary)") {
  for (const std::string& f : documented()) {
    e2e::Result r = e2e::trainer("summary '" + (kConfigs / f).string() + "'");
    INFO("trainer summary configs/" << f << ": exit " << r.code << "\n" << r.err);
    CHECK(r.code == 0);
  }
}
