// The bad-input corpus: every case must print exactly one line on stderr and exit with its documented code.
//
// A case is one row of a table in bad_inputs/*_cases.h (helpers in bad_inputs/corpus.h): the files it
// needs (a config, data files, folders), the command line, the exit code and the message. To add
// one, append a row to the table of its area (or start a new table and list it in corpus()):
//
//   {.cat = "range", .name = "negative batch size",
//    .config = changed({{"batch_size: 4", "batch_size: -4"}}),            // the base config, one fragment changed
//    .code = 2, .expect = "c.yaml:13:32: 'train.batch_size' must be between 1 and 1048576, not -4"},
//
// `config` is written as c.yaml (args default to "run c.yaml"); `files` adds others (a path ending
// in '/' is an empty folder; fifo() and symlink_to() make a named pipe and a link, e.g. to /dev/zero;
// fixture() reads tests/e2e/bad_inputs/<name>). `expect` is the whole
// line with "..." standing for any text: "data error: cifar/data_batch_1.bin: truncated...3173".
// Every case runs under `timeout 60` in a fresh directory of its own, so a hang fails, not blocks.
// A case whose fix lies in code someone else owns gets `.why_excluded = "..."`: it still runs, and
// its state is printed, but it is not counted until it behaves. TRAINER_CORPUS_ONLY=<text> runs the
// cases whose "category: name" contains it; TRAINER_CORPUS_SHOW=1 prints every actual result.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "bad_inputs/checkpoint_cases.h"
#include "bad_inputs/config_cases.h"
#include "bad_inputs/data_cases.h"
#include "bad_inputs/device_parallel_cases.h"
#include "bad_inputs/export_cases.h"
#include "bad_inputs/hostile_cases.h"
#include "bad_inputs/hostile_files_cases.h"
#include "bad_inputs/special_files_cases.h"
#include "bad_inputs/usage_cases.h"
#include "cli.h"

namespace fs = std::filesystem;
using namespace bad_inputs;

namespace {

// Every table, in order. A new area (checkpoints, run directories, ...) adds its header and a line here.
std::vector<Case> corpus() {
  std::vector<Case> all;
  for (auto table : {config_cases, data_cases, usage_cases, checkpoint_cases, device_parallel_cases, export_cases,
                     hostile_cases, hostile_files_cases, special_files_cases})
    for (Case& c : table()) all.push_back(std::move(c));
  return all;
}

// "a...b...c": starts with a, then b, then c, in order; ends with c unless the pattern ends with "...".
bool matches(const std::string& line, const std::string& pattern) {
  std::vector<std::string> parts;
  for (size_t pos = 0;;) {
    size_t d = pattern.find("...", pos);
    parts.push_back(pattern.substr(pos, d == std::string::npos ? std::string::npos : d - pos));
    if (d == std::string::npos) break;
    pos = d + 3;
  }
  if (line.compare(0, parts[0].size(), parts[0]) != 0) return false;
  size_t at = parts[0].size();
  if (parts.size() == 1) return at == line.size();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (i + 1 == parts.size() && !parts[i].empty()) {  // the last part ends the line
      return line.size() >= at + parts[i].size() && line.compare(line.size() - parts[i].size(), parts[i].size(), parts[i]) == 0;
    }
    size_t f = line.find(parts[i], at);
    if (f == std::string::npos) return false;
    at = f + parts[i].size();
  }
  return true;
}

void create(const std::string& dir, const File& f) {
  fs::path p = fs::path(dir) / f.path;
  if (!f.path.empty() && f.path.back() == '/') {
    fs::create_directories(p);
    return;
  }
  fs::create_directories(p.parent_path());
  if (f.kind == File::Fifo) {
    if (::mkfifo(p.c_str(), 0644) != 0) throw std::runtime_error("corpus: cannot make the FIFO " + p.string());
  } else if (f.kind == File::Symlink) {
    fs::create_symlink(f.bytes, p);
  } else {
    std::ofstream(p, std::ios::binary) << f.bytes;
  }
}

// What is wrong with one case's result ("" when it is right).
std::string problem(const Case& c, const e2e::Result& r) {
  std::string line = r.err;
  if (line.empty()) return "nothing on stderr";
  if (line.back() != '\n') return "stderr does not end with a newline";
  line.pop_back();
  if (line.empty()) return "an empty line on stderr";
  if (line.find('\n') != std::string::npos) return "more than one line on stderr";
  if (r.code != c.code) return "exit code " + std::to_string(r.code) + ", expected " + std::to_string(c.code);
  if (!matches(line, c.expect)) return "the message differs from: " + c.expect;
  return "";
}

}  // namespace

TEST_CASE("e2e bad-input corpus: one line on stderr and the documented exit code for each") {
  std::vector<Case> cases = corpus();
  // For debugging: TRAINER_CORPUS_ONLY=<part of a case's "category: name"> runs only those;
  // TRAINER_CORPUS_SHOW=1 prints every case's exit code and stderr.
  const char* only = std::getenv("TRAINER_CORPUS_ONLY");
  const bool show = std::getenv("TRAINER_CORPUS_SHOW") != nullptr;
  std::map<std::string, int> per_cat;
  int run = 0, failed = 0;
  for (const Case& c : cases) {
    std::string title = c.cat + ": " + c.name;
    if (only && title.find(only) == std::string::npos) continue;
    std::string dir = e2e::temp_dir("bad");
    if (!c.config.empty()) create(dir, {"c.yaml", c.config});
    for (const File& f : c.files) create(dir, f);
    e2e::Result r = e2e::trainer(c.args, dir, c.env + " timeout 60");
    std::string what = problem(c, r);
    if (show) std::cout << title << "  [" << c.args << "]\n  exit " << r.code << ": " << r.err;
    if (!c.why_excluded.empty()) {  // a known problem outside this corpus' reach: reported, not failed
      if (what.empty())
        WARN("bad-input corpus: '" << title << "' behaves now: drop its why_excluded so it counts");
      else
        WARN("bad-input corpus: '" << title << "' left out, still wrong (" << what << "): " << c.why_excluded);
      fs::remove_all(dir);
      continue;
    }
    INFO(title << "\n  trainer " << c.args << "\n  exit " << r.code << ", stderr:\n" << r.err);
    CHECK(what == "");
    if (what.empty()) fs::remove_all(dir);
    ++run;
    failed += !what.empty();
    per_cat[c.cat]++;
  }
  std::string counts;
  for (const auto& [cat, n] : per_cat) counts += (counts.empty() ? "" : ", ") + cat + " " + std::to_string(n);
  if (failed == 0)
    WARN("bad-input corpus: " << run << " cases, all with one line and the documented exit code (" << counts << ")");
  else
    WARN("bad-input corpus: " << failed << " of " << run << " cases wrong");
  CHECK(run >= (only ? 1 : 55));
}

TEST_CASE("e2e bad-input corpus: the reference config the cases change is itself good") {
  std::string dir = e2e::temp_dir("good");
  e2e::write_file(dir + "/c.yaml", kBase);
  auto r = e2e::trainer("run c.yaml", dir, "timeout 120");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(e2e::trainer("summary c.yaml", dir, "timeout 60").code == 0);
  // The data-reader bases, with good files, get past their readers.
  for (const auto& [config, files] : std::vector<std::pair<std::string, std::vector<File>>>{
           {kCifarModel, cifar_folder()},
           {kMnistModel, {{"img.idx", idx_images(0x803, 2, 4, 4, 32)}, {"lab.idx", idx_labels(2, "\1\2")}}},
           {kFolderModel, {{"imgs/a/1.png", fixture("rgb4x4.png")}, {"imgs/b/1.png", fixture("rgb4x4.png")}}}}) {
    std::string d = e2e::temp_dir("goodata");
    create(d, {"c.yaml", config});
    for (const File& f : files) create(d, f);
    auto g = e2e::trainer("run c.yaml", d, "timeout 120");
    INFO(config << "\n" << g.err);
    CHECK(g.code == 0);
  }
}

// The corpus README's table (tests/e2e/bad_inputs/README.md, "| class | cases | exit codes |")
// must list every class with its count and exit codes, and the total: it cannot go stale.
TEST_CASE("e2e bad-input corpus: its README counts each class and exit code") {
  std::map<std::string, std::pair<int, std::set<int>>> actual;
  int total = 0;
  for (const Case& c : corpus()) {
    if (!c.why_excluded.empty()) continue;
    actual[c.cat].first++;
    actual[c.cat].second.insert(c.code);
    ++total;
  }
  auto codes = [](const std::set<int>& s) {
    std::string out;
    for (int k : s) out += (out.empty() ? "" : ", ") + std::to_string(k);
    return out;
  };
  std::string expected = "| class | cases | exit codes |\n|---|---|---|\n";
  for (const auto& [cat, v] : actual) expected += "| " + cat + " | " + std::to_string(v.first) + " | " + codes(v.second) + " |\n";
  expected += "| **total** | " + std::to_string(total) + " | |\n";
  std::string readme = e2e::read_file(TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/README.md");
  INFO("the README's table should read:\n" << expected);
  CHECK(readme.find(expected) != std::string::npos);
  WARN("bad-input corpus README: " << actual.size() << " classes, " << total << " cases");
}
