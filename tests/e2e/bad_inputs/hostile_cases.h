// Bad-input cases built to exhaust the machine or escape the run directory: YAML alias bombs,
// nesting, huge files, block expansions, parameter sizes, run names, checkpoints that do not fit.
#pragma once
#include <string>
#include <vector>

#include "checkpoint_cases.h"
#include "corpus.h"

namespace bad_inputs {

// "Billion laughs": kBase plus `levels` lines, each a list of nine aliases of the line above;
// the first line, lol_a, is line 17 of the file.
inline std::string alias_bomb(int levels = 9) {
  std::string text = kBase, prev;
  for (int i = 0; i < levels; ++i) {
    std::string anchor(1, char('a' + i)), items;
    for (int k = 0; k < 9; ++k) items += (k ? ", " : "") + (i == 0 ? std::string("lol") : "*" + prev);
    text += "lol_" + anchor + ": &" + anchor + " [" + items + "]\n";
    prev = anchor;
  }
  return text;
}

// `depth` lists inside each other as one more key of kBase (line 17).
inline std::string nested(int depth) { return kBase + "deep: " + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + "\n"; }

// Blocks that use blocks: b1 has ten dense layers, each further level ten instances of the one below.
inline std::string block_bomb(int levels) {
  std::string m = "model:\n  input: [4]\n  blocks:\n    b1:\n      layers:\n";
  for (int k = 0; k < 10; ++k) m += "        - {type: dense, units: 2}\n";
  for (int l = 2; l <= levels; ++l) {
    m += "    b" + std::to_string(l) + ":\n      layers:\n";
    for (int k = 0; k < 10; ++k) m += "        - {type: b" + std::to_string(l - 1) + "}\n";
  }
  m += "  layers:\n    - {type: b" + std::to_string(levels) + "}\n";
  return with_model(m);
}

inline std::vector<Case> hostile_cases() {
  const GoodRun& g = good_run();
  const std::string st = "r/checkpoints/epoch-0001.safetensors", js = "r/checkpoints/epoch-0001.json";
  const std::string no_conv = changed({{"    - {name: conv, type: conv2d, filters: 4, kernel: 3}\n", ""}});
  const std::string flow_bomb =  // the same bomb as one --set value
      "'x=[&a [l, l, l, l, l, l, l, l, l, l], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a], &c [*b, *b, *b, *b, *b, *b, "
      "*b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c], &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d], "
      "&f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]]'";
  return {
      // ---- expansion bounds (core/io/config_bounds.cpp) ----
      {.cat = "bomb", .name = "alias bomb (billion laughs)", .config = alias_bomb(), .args = "run c.yaml",
       .expect = "c.yaml:22:8: this value expands to 597,871 values (aliases count at each use); a config may hold at most 100,000"},
      {.cat = "bomb", .name = "alias bomb, summary", .config = alias_bomb(), .args = "summary c.yaml",
       .expect = "c.yaml:22:8: this value expands to 597,871 values..."},
      {.cat = "bomb", .name = "alias bomb, eval", .config = alias_bomb(), .args = "eval --config c.yaml nothere",
       .code = 3, .expect = "file error: nothere: no such run directory or checkpoint"},
      {.cat = "bomb", .name = "alias bomb in --set", .config = kBase, .args = "run c.yaml --set " + flow_bomb,
       .expect = "--set x=[&a [l, ...: this value expands to 111,111 values (aliases count at each use); a config may hold at most 100,000"},
      {.cat = "bomb", .name = "4 levels of aliases are fine, the key is not", .config = alias_bomb(4),
       .expect = "c.yaml:17:1: unknown key 'lol_a' in the config"},
      {.cat = "bomb", .name = "lists nested 65 deep", .config = nested(65),
       .expect = "c.yaml:17:71: lists and maps nest more than 64 deep here; a config is not that deep"},
      {.cat = "bomb", .name = "lists nested 100,000 deep", .config = nested(100000),
       .expect = "c.yaml:17:...: lists and maps nest more than 64 deep here; a config is not that deep"},
      {.cat = "bomb", .name = "a 5 MiB config", .config = kBase + "# " + std::string(5 << 20, 'x') + "\n",
       .expect = "c.yaml:1:1: the config is larger than 4 MiB; a config may be at most that (is this the right file?)"},
      {.cat = "bomb", .name = "/dev/zero as the config", .args = "run /dev/zero",
       .expect = "/dev/zero: cannot read the config file: it is a character device, not a regular file"},
      {.cat = "bomb", .name = "a 3 MiB scalar", .config = changed({{"name: bad", "name: " + std::string(3 << 20, 'n')}}),
       .expect = "c.yaml:1:7: 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...' (3145728 characters) is not a valid run name..."},
      {.cat = "bomb", .name = "blocks inside blocks: 100,000 layers", .config = block_bomb(5),
       .expect = "c.yaml:...: the model expands to more than 10000 layers here (blocks inside blocks multiply); a model may have at most 10000"},
      {.cat = "bomb", .name = "parameters larger than the machine's memory",
       .config = with_model("model:\n  input: [1048576]\n  layers:\n    - {type: dense, units: 1048576}\n"),
       .expect = "c.yaml:5:7: the model's parameters reach 4096.0 GiB with dense layer 'dense_1', more than this machine's ... GiB of memory"},
      {.cat = "bomb", .name = "parameters larger than memory, summary",
       .config = with_model("model:\n  input: [1048576]\n  layers:\n    - {type: dense, units: 1048576}\n"), .args = "summary c.yaml",
       .expect = "c.yaml:5:7: the model's parameters reach 4096.0 GiB..."},
      {.cat = "bomb", .name = "merge key", .config = kBase + "base: &base {epochs: 1}\nmore:\n  <<: *base\n",
       .expect = "c.yaml:17:1: unknown key 'base' in the config (did you mean 'name'?)"},

      // ---- run names (core/run/spec.cpp): one folder under the runs root ----
      {.cat = "run name", .name = "climbs out", .config = changed({{"name: bad", "name: ../../x"}}),
       .expect = "c.yaml:1:7: '../../x' is not a valid run name: it names the run's folder, so use letters, digits and - _ . + = "
                 "(at most 128, not starting with . or -)"},
      {.cat = "run name", .name = "absolute path", .config = changed({{"name: bad", "name: /tmp/x"}}),
       .expect = "c.yaml:1:7: '/tmp/x' is not a valid run name..."},
      {.cat = "run name", .name = "a slash inside", .config = changed({{"name: bad", "name: a/b"}}),
       .expect = "c.yaml:1:7: 'a/b' is not a valid run name..."},
      {.cat = "run name", .name = "NUL byte", .config = changed({{"name: bad", "name: \"a\\0b\""}}),
       .expect = "c.yaml:1:7: 'a\\x00b' is not a valid run name..."},
      {.cat = "run name", .name = "dot-dot", .config = changed({{"name: bad", "name: '..'"}}),
       .expect = "c.yaml:1:7: '..' is not a valid run name..."},
      {.cat = "run name", .name = "hidden", .config = changed({{"name: bad", "name: .x"}}),
       .expect = "c.yaml:1:7: '.x' is not a valid run name..."},
      {.cat = "run name", .name = "a space", .config = changed({{"name: bad", "name: a b"}}),
       .expect = "c.yaml:1:7: 'a b' is not a valid run name..."},
      {.cat = "run name", .name = "an option", .config = changed({{"name: bad", "name: -rf"}}),
       .expect = "c.yaml:1:7: '-rf' is not a valid run name..."},
      {.cat = "run name", .name = "empty", .config = changed({{"name: bad", "name: ''"}}),
       .expect = "c.yaml:1:7: '' is not a valid run name..."},
      {.cat = "run name", .name = "129 characters", .config = changed({{"name: bad", "name: " + std::string(129, 'a')}}),
       .expect = "c.yaml:1:7: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' (129 characters) is not a valid run name..."},
      {.cat = "run name", .name = "a list", .config = changed({{"name: bad", "name: [a]"}}),
       .expect = "c.yaml:1:7: ..."},
      {.cat = "run name", .name = "through --set", .config = kBase, .args = "run c.yaml --set name=../../etc",
       .expect = "--set name=../../etc: '../../etc' is not a valid run name..."},
      {.cat = "run name", .name = "absolute through --set", .config = kBase, .args = "run c.yaml --set name=/x",
       .expect = "--set name=/x: '/x' is not a valid run name..."},
      {.cat = "run name", .name = "newline through --set", .config = kBase, .args = "run c.yaml --set \"name=a$(printf '\\nb')\"",
       .expect = "--set name=a...is not a valid run name..."},

      // ---- checkpoints that do not fit (core/checkpoint/checkpoint.cpp) ----
      {.cat = "checkpoint", .name = "resume: the checkpoint has a layer the model lacks", .config = no_conv,
       .files = run_dir(g.weights, g.sidecar), .args = "run c.yaml --resume r",
       .expect = st + ": 'conv/kernel' in the checkpoint is not a parameter of the model (does the config match the checkpoint?)"},
      {.cat = "checkpoint", .name = "eval: the checkpoint has a layer the model lacks", .config = no_conv,
       .files = run_dir(g.weights, g.sidecar), .args = "eval r --config c.yaml --data c.yaml",
       .expect = "..."},
      {.cat = "checkpoint", .name = "resume: a run whose only checkpoint is of a newer format",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"format_version\": 1", "\"format_version\": 2")), .args = "run --resume r",
       .code = 3, .expect = "file error: r/checkpoints: no valid checkpoint (1 invalid: " + js + ": bad checkpoint sidecar: format version 2 is newer than this trainer's (1))"},
      {.cat = "checkpoint", .name = "resume: a sidecar naming a file outside by an absolute path",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"file\": \"epoch-0001.safetensors\"", "\"file\": \"/etc/passwd\"")),
       .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: weights file '/etc/passwd' is not a plain name"},
      {.cat = "checkpoint", .name = "resume: a sidecar naming the parent folder",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"file\": \"epoch-0001.safetensors\"", "\"file\": \"..\"")),
       .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: weights file '..' is not a plain name"},
      {.cat = "checkpoint", .name = "resume: a sidecar naming a file with a newline",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"file\": \"epoch-0001.safetensors\"", "\"file\": \"a\\nb\"")),
       .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: weights file 'a\\nb' is not a plain name"},
  };
}

}  // namespace bad_inputs
