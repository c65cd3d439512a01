// Bad-input corpus: command-line usage (exit 2), device lists (exit 2, or 4 with no GPU), summary/bench.
#pragma once
#include "corpus.h"

namespace bad_inputs {

inline std::vector<Case> usage_cases() {
  return {
      // ---- command-line usage -----------------------------------------------------------------------
      {.cat = "cli", .name = "unknown option", .config = kBase, .args = "run c.yaml --no-such-flag",
       .expect = "The following argument was not expected: --no-such-flag (see trainer run --help)"},
      {.cat = "cli", .name = "unknown subcommand", .args = "frobnicate",
       .expect = "'frobnicate' is not a trainer command; commands: ...run...(see trainer --help)"},
      {.cat = "cli", .name = "misspelt subcommand", .args = "rnu c.yaml",
       .expect = "'rnu' is not a trainer command (did you mean 'run'?); commands: ...(see trainer --help)"},
      {.cat = "cli", .name = "no subcommand", .args = "", .expect = "A subcommand is required (see trainer --help)"},
      {.cat = "cli", .name = "two configs", .config = kBase, .args = "run c.yaml c.yaml",
       .expect = "The following argument was not expected: c.yaml (see trainer run --help)"},
      {.cat = "cli", .name = "--set without a value", .config = kBase, .args = "run c.yaml --set",
       .expect = "--set: ...(see trainer run --help)"},
      {.cat = "cli", .name = "run without a config", .args = "run", .expect = "trainer run: give a CONFIG file..."},
      {.cat = "cli", .name = "--cpu 0", .config = kBase, .args = "run c.yaml --cpu 0", .expect = "--cpu: expected a positive number, not '0' (see trainer run --help)"},
      {.cat = "cli", .name = "--cpu not a number", .config = kBase, .args = "run c.yaml --cpu two", .expect = "--cpu: expected a positive number, not 'two' (see trainer run --help)"},
      {.cat = "cli", .name = "--gpus garbage", .config = kBase, .args = "run c.yaml --gpus x1",
       .expect = "--gpus x1: expected a GPU count (4), ordinals (0,2 or 0,0 or 1,) or 'all'"},
      {.cat = "cli", .name = "--gpus with no GPU", .config = kBase, .args = "run c.yaml --gpus 0", .env = kNoGpu, .code = 4,
       .expect = "device error: GPUs were requested but none is visible: ..."},
      {.cat = "cli", .name = "--gpus and --cpu together", .config = kBase, .args = "run c.yaml --gpus 0 --cpu 2",
       .expect = "--gpus excludes --cpu (see trainer run --help)"},
      {.cat = "cli", .name = "--cpu too many", .config = kBase, .args = "run c.yaml --cpu 5000",
       .expect = "--cpu 5000: at most 1024 CPU replicas"},
      {.cat = "cli", .name = "--cpu fractional", .config = kBase, .args = "run c.yaml --cpu 1.5",
       .expect = "Could not convert: --cpu = 1.5 (see trainer run --help)"},
      {.cat = "cli", .name = "--gpus negative", .config = kBase, .args = "run c.yaml --gpus=-1",
       .expect = "--gpus -1: expected a GPU count (4), ordinals (0,2 or 0,0 or 1,) or 'all'"},
      {.cat = "cli", .name = "--threads too many", .config = kBase, .args = "run c.yaml --threads 99999",
       .expect = "--threads 99999: at most 4096 threads per replica"},
      {.cat = "cli", .name = "--threads 0", .config = kBase, .args = "run c.yaml --threads 0", .expect = "--threads: expected a positive number, not '0' (see trainer run --help)"},
      {.cat = "cli", .name = "--gpus empty", .config = kBase, .args = "run c.yaml --gpus ,",
       .expect = "--gpus ,: expected a GPU count (4), ordinals (0,2 or 0,0 or 1,) or 'all'"},

      // ---- device lists in the config ---------------------------------------------------------------
      {.cat = "devices", .name = "a GPU on a machine without one", .config = changed({{"devices: {cpu: 1}", "devices: {gpus: [0]}"}}),
       .env = kNoGpu, .code = 4, .expect = "device error: GPUs were requested but none is visible: ..."},
      {.cat = "devices", .name = "gpus: all without a GPU", .config = changed({{"devices: {cpu: 1}", "devices: {gpus: all}"}}),
       .env = kNoGpu, .code = 4, .expect = "device error: GPUs were requested but none is visible: ..."},
      {.cat = "devices", .name = "negative GPU ordinal", .config = changed({{"devices: {cpu: 1}", "devices: {gpus: [-1]}"}}),
       .expect = "c.yaml:16:18: GPU ordinals are 0 or more"},
      {.cat = "devices", .name = "GPU list of names", .config = changed({{"devices: {cpu: 1}", "devices: {gpus: [a100]}"}}),
       .expect = "c.yaml:16:18: 'devices.gpus[0]' must be an integer, not 'a100'"},
      {.cat = "devices", .name = "zero CPU replicas", .config = changed({{"devices: {cpu: 1}", "devices: {cpu: 0}"}}),
       .expect = "c.yaml:16:16: 'devices.cpu' must be between 1 and 1024, not 0"},
      {.cat = "devices", .name = "negative threads", .config = changed({{"devices: {cpu: 1}", "devices: {cpu: 1, threads: -2}"}}),
       .expect = "c.yaml:16:28: 'devices.threads' must be between 0 and 4096, not -2"},

      // ---- other subcommands with bad configs -------------------------------------------------------
      {.cat = "subcommand", .name = "summary: unknown key", .config = changed({{"filters: 4", "filtrs: 4"}}), .args = "summary c.yaml",
       .expect = "c.yaml:5:34: unknown key 'filtrs' in conv2d layer 'conv' (did you mean 'filters'?)"},
      {.cat = "subcommand", .name = "summary: missing file", .args = "summary nothere.yaml",
       .expect = "nothere.yaml: cannot open the config file: No such file or directory"},
      {.cat = "subcommand", .name = "summary: bad shape", .config = changed({{"kernel: 3", "kernel: 9"}}), .args = "summary c.yaml",
       .expect = "c.yaml:5:7: conv2d 'conv': a 9x9 kernel does not fit its 8x8 input with padding 'valid'"},
      {.cat = "subcommand", .name = "summary: bad --set", .config = kBase, .args = "summary c.yaml --set model.input=[8,8,3,1]",
       .expect = "--set model.input=[8,8,3,1]: 'model.input' must be [height, width, channels], [steps, features] or [features]"},
      {.cat = "subcommand", .name = "bench: cycle",
       .config = with_model("model:\n  input: [4]\n  layers:\n    - {name: a, type: dense, units: 4, inputs: [b]}\n"
                            "    - {name: b, type: dense, units: 3, inputs: [a]}\n"),
       .args = "bench c.yaml --steps 1", .expect = "c.yaml:5:7: the layers form a cycle: a -> b -> a"},
      {.cat = "subcommand", .name = "bench: --gpus with no GPU", .config = kBase, .args = "bench c.yaml --steps 1 --gpus 1", .env = kNoGpu, .code = 4,
       .expect = "device error: GPUs were requested but none is visible: ..."},
      {.cat = "subcommand", .name = "bench: --steps 0", .config = kBase, .args = "bench c.yaml --steps 0", .expect = "--steps: expected a positive number, not '0' (see trainer bench --help)"},
      {.cat = "subcommand", .name = "bench: --warmup -1", .config = kBase, .args = "bench c.yaml --warmup=-1",
       .expect = "--warmup: expected a number of 0 or more, not '-1' (see trainer bench --help)"},
      {.cat = "subcommand", .name = "bench: broken YAML", .config = changed({{"input: [8, 8, 3]", "input: [8, 8, 3"}}),
       .args = "bench c.yaml", .expect = "c.yaml:4:9: end of sequence flow not found (a ']' missing?)"},
  };
}

}  // namespace bad_inputs
