// libFuzzer target for the config loader: bytes -> YAML document -> whole RunSpec -> summary.
//
// Each input is one config file's text. It goes through what `trainer summary` does with a file
// (cfg::parse_document, read_run_spec: model graph, optimizer, schedule; a Graph and its
// Keras-style summary) and through what `trainer run` writes into the run directory (the
// resolved config, cfg::emit). cfg::ConfigError is the documented answer to a bad config (exit
// code 2) and is swallowed; any other exception escapes and libFuzzer reports it as a crash, as
// it does a sanitizer report, a timeout or a leak. Nothing is written to disk and no data is read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/run/spec.h"
#include "core/graph/graph.h"
#include "core/graph/summary.h"
#include "core/io/config.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto doc = cfg::parse_document(text, "fuzz.yaml");
    RunSpec e = read_run_spec(doc);
    Graph g(e.model);
    std::string table = model_summary(g, e.name);
    std::string resolved = cfg::emit(*e.doc);
    if (table.empty() || resolved.empty()) __builtin_trap();  // both always say something
  } catch (const cfg::ConfigError&) {
    // A config error with its file:line:col: the expected outcome for most inputs.
  }
  return 0;
}
