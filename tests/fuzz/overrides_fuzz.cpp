// libFuzzer target for `--set key.path=value` overrides: each input line is one --set, applied to a small config.
//
// The overrides go through what `trainer run CONFIG --set ...` does before training: parsing
// each "a.b.3.c=value" (value parsed as YAML), applying it to the document (creating keys,
// indexing lists), reading the whole RunSpec, building the graph and emitting the resolved
// config. cfg::ConfigError (exit 2) is the documented refusal; anything else is a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/run/spec.h"
#include "core/graph/graph.h"
#include "core/io/config.h"

using namespace trainer;

namespace {

const char* const kBase = R"(name: fuzz
seed: 7
model:
  input: [8, 8, 3]
  layers:
    - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: same}
    - {name: relu1, type: relu}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 10}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, seed: 1}
  validation_split: 0.25
  augment: {mean: per_channel}
train: {epochs: 1, batch_size: 8}
optimizer: {type: sgd, lr: 0.01, momentum: 0.9}
schedule: {type: cosine}
checkpoint: {every: 1, keep: 2}
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> sets;
  std::string line;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      if (!line.empty()) sets.push_back(line);
      line.clear();
      if (sets.size() == 16) break;
    } else {
      line += char(data[i]);
    }
  }
  try {
    auto doc = cfg::parse_document(kBase, "fuzz.yaml", sets);
    RunSpec e = read_run_spec(doc);
    Graph g(e.model);
    if (cfg::emit(*e.doc).empty()) __builtin_trap();
  } catch (const cfg::ConfigError&) {
    // "--set ...: message" or file:line:col: the expected outcome for most inputs.
  }
  return 0;
}
