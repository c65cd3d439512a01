// Bad-input corpus: corrupt, truncated and mismatched checkpoints (exit 3 / exit 2), bad --resume
// and eval targets, predict inputs, init.from, checkpoint/callback settings, unwritable run directories, a full disk.
#pragma once
#include <filesystem>

#include "corpus.h"

namespace bad_inputs {

// One real run of kBase (4 steps) whose run directory the cases copy and damage.
struct GoodRun {
  std::string config, weights, sidecar;
};

inline const GoodRun& good_run() {
  static const GoodRun run = [] {
    std::string dir = e2e::temp_dir("ckptsrc");
    e2e::write_file(dir + "/c.yaml", kBase);
    e2e::Result r = e2e::trainer("run c.yaml --run-dir r", dir, "timeout 120");
    if (r.code != 0) throw std::logic_error("corpus: the reference run failed: " + r.err);
    return GoodRun{e2e::read_file(dir + "/r/config.yaml"), e2e::read_file(dir + "/r/checkpoints/epoch-0001.safetensors"),
                   e2e::read_file(dir + "/r/checkpoints/epoch-0001.json")};
  }();
  return run;
}

// The run directory r/ with its checkpoint's weights and sidecar as given.
inline std::vector<File> run_dir(const std::string& weights, const std::string& sidecar) {
  std::vector<File> f{{"r/config.yaml", good_run().config}};
  if (!weights.empty()) f.push_back({"r/checkpoints/epoch-0001.safetensors", weights});
  if (!sidecar.empty()) f.push_back({"r/checkpoints/epoch-0001.json", sidecar});
  return f;
}

inline std::string replaced(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  if (at == std::string::npos) throw std::logic_error("corpus: '" + from + "' not in the checkpoint");
  return s.replace(at, from.size(), to);
}

// The run directory's files and more.
inline std::vector<File> with(std::vector<File> files, const std::vector<File>& more) {
  files.insert(files.end(), more.begin(), more.end());
  return files;
}

inline std::vector<Case> checkpoint_cases() {
  const GoodRun& g = good_run();
  std::string flipped = g.weights;
  flipped[flipped.size() - 3] ^= 0x40;  // one bit of the last tensor
  std::string bad_header = g.weights;
  bad_header[8] = '#';
  const std::string st = "r/checkpoints/epoch-0001.safetensors", js = "r/checkpoints/epoch-0001.json";
  return {
      // ---- --resume targets ---------------------------------------------------------------------------
      {.cat = "checkpoint", .name = "resume: no such run", .args = "run --resume nowhere", .code = 3,
       .expect = "file error: nowhere: no such run directory or checkpoint"},
      {.cat = "checkpoint", .name = "resume: a run without checkpoints", .files = {{"r/config.yaml", g.config}, {"r/checkpoints/", ""}},
       .args = "run --resume r", .code = 3, .expect = "file error: r/checkpoints: no valid checkpoint"},
      {.cat = "checkpoint", .name = "resume: a folder that is no run", .files = {{"x/", ""}}, .args = "run --resume x", .code = 3,
       .expect = "file error: x: not a run directory or a checkpoint in one (no x/config.yaml)"},
      {.cat = "checkpoint", .name = "resume auto without a config", .args = "run --resume auto",
       .expect = "trainer run: give a CONFIG file (or --resume RUN_DIR|CHECKPOINT, which brings its own)"},
      {.cat = "checkpoint", .name = "resume: truncated weights", .files = run_dir(g.weights.substr(0, g.weights.size() / 2), g.sidecar),
       .args = "run --resume " + st, .code = 3, .expect = "file error: " + st + ": ... bytes, the sidecar says ...: truncated or replaced"},
      {.cat = "checkpoint", .name = "resume: a flipped bit", .files = run_dir(flipped, g.sidecar), .args = "run --resume " + st, .code = 3,
       .expect = "file error: " + st + ": CRC-32 ... differs from the sidecar's ...: the file is corrupt"},
      {.cat = "checkpoint", .name = "resume: weights without a sidecar (a write cut short)", .files = run_dir(g.weights, ""),
       .args = "run --resume " + st, .code = 3,
       .expect = "file error: " + st + ": no sidecar " + js + " next to it: the checkpoint was not completely written"},
      {.cat = "checkpoint", .name = "resume: the run's only checkpoint lacks its sidecar", .files = run_dir(g.weights, ""),
       .args = "run --resume r", .code = 3, .expect = "file error: r/checkpoints: no valid checkpoint"},
      {.cat = "checkpoint", .name = "resume: sidecar is not JSON", .files = run_dir(g.weights, "{\"format\": "), .args = "run --resume r",
       .code = 3, .expect = "file error: r/checkpoints: no valid checkpoint (1 invalid: " + js + ": corrupt checkpoint sidecar at byte ...: not valid JSON)"},
      {.cat = "checkpoint", .name = "resume: sidecar of another tool", .files = run_dir(g.weights, "{\"format\": \"keras\"}"),
       .args = "run --resume " + js, .code = 3,
       .expect = "file error: " + js + ": bad checkpoint sidecar: it is not a trainer checkpoint sidecar"},
      {.cat = "checkpoint", .name = "resume: sidecar missing a field", .files = run_dir(g.weights, replaced(g.sidecar, "\"global_step\"", "\"globl_step\"")),
       .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: ...global_step..."},
      {.cat = "checkpoint", .name = "resume: sidecar from a newer format", .files = run_dir(g.weights, replaced(g.sidecar, "\"format_version\": 1", "\"format_version\": 9")),
       .args = "run --resume " + js, .code = 3,
       .expect = "file error: " + js + ": bad checkpoint sidecar: format version 9 is newer than this trainer's (1)"},
      {.cat = "checkpoint", .name = "resume: negative position", .files = run_dir(g.weights, replaced(g.sidecar, "\"epoch\": 1", "\"epoch\": -4")),
       .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: 'epoch' is out of range: -4"},
      {.cat = "checkpoint", .name = "resume: an epoch past every integer type (sidecar_fuzz's find)",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"epoch\": 1", "\"epoch\": 88888888888888888881")), .args = "run --resume " + js,
       .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: 'epoch' is not a whole number"},
      {.cat = "checkpoint", .name = "resume: a fractional global batch",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"global_batch\": ", "\"global_batch\": 0.5, \"x\": ")), .args = "run --resume " + js,
       .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: 'global_batch' is not a whole number"},
      {.cat = "checkpoint", .name = "resume: a number past double's range (safetensors_fuzz's find)",
       .files = run_dir(g.weights, replaced(g.sidecar, "\"epoch\": 1", "\"epoch\": 1e999")), .args = "run --resume " + js, .code = 3,
       .expect = "file error: " + js + ": corrupt checkpoint sidecar: it holds a number too large for a double"},
      {.cat = "checkpoint", .name = "resume: sidecar names a path", .files = run_dir(g.weights, replaced(g.sidecar, "\"file\": \"epoch-0001.safetensors\"", "\"file\": \"../../etc/passwd\"")),
       .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: weights file '../../etc/passwd' is not a plain name"},
      {.cat = "checkpoint", .name = "resume: a checkpoint of another model", .config = changed({{"filters: 4", "filters: 6"}}),
       .files = run_dir(g.weights, g.sidecar), .args = "run c.yaml --resume r", .code = 2,
       .expect = st + ": 'conv/kernel' has shape 3x3x3x4, the model's is 3x3x3x6 (does the config match the checkpoint?)"},
      {.cat = "checkpoint", .name = "resume: a global batch the replicas cannot split", .files = run_dir(g.weights, g.sidecar),
       .args = "run --resume r --cpu 3", .code = 2, .expect = js + ": the checkpoint's global batch of 4 cannot be split over 3 replicas"},

      // ---- eval ---------------------------------------------------------------------------------------
      {.cat = "checkpoint", .name = "eval: corrupt header", .files = run_dir(bad_header, g.sidecar), .args = "eval " + st, .code = 3,
       .expect = "file error: " + st + ": corrupt safetensors file at byte 8: the header is not valid JSON"},
      {.cat = "checkpoint", .name = "eval: a flipped bit", .files = run_dir(flipped, g.sidecar), .args = "eval r", .code = 3,
       .expect = "file error: r/checkpoints: no valid checkpoint (1 invalid: " + st + ": CRC-32 ... differs from the sidecar's ...: the file is corrupt)"},
      {.cat = "checkpoint", .name = "eval: sidecar without its normalization", .files = run_dir(g.weights, replaced(g.sidecar, "\"normalization\"", "\"normalisation\"")),
       .args = "eval " + js + " --split train", .code = 3, .expect = "file error: " + js + ": bad checkpoint sidecar: ...normalization..."},
      {.cat = "checkpoint", .name = "eval: no such split", .files = run_dir(g.weights, g.sidecar), .args = "eval r --split test",
       .expect = "r/config.yaml:...: the config has no data.test to evaluate on (give one with --data)"},
      {.cat = "checkpoint", .name = "eval: no val split", .files = run_dir(g.weights, g.sidecar), .args = "eval r",
       .expect = "r/config.yaml:...: the config has no data.val to evaluate on (give one with --data)"},
      {.cat = "checkpoint", .name = "eval: bad --split", .files = run_dir(g.weights, g.sidecar), .args = "eval r --split dev",
       .expect = "--split: dev not in {val,test,train} (see trainer eval --help)"},

      // ---- predict (its inputs: one line each, the others predicted; exit 3) ---------------------------
      {.cat = "predict", .name = "predict: a missing input", .files = run_dir(g.weights, g.sidecar), .args = "predict r missing.jpg",
       .code = 3, .expect = "data error: missing.jpg: no such file or folder"},
      {.cat = "predict", .name = "predict: text named like an image", .files = with(run_dir(g.weights, g.sidecar), {{"a.png", "hello"}}),
       .args = "predict r a.png", .code = 3, .expect = "data error: a.png: not a JPEG or PNG file (first bytes 68 65 6c 6c 6f)"},
      {.cat = "predict", .name = "predict: a FIFO named like an image", .files = with(run_dir(g.weights, g.sidecar), {fifo("a.jpg")}),
       .args = "predict r a.jpg", .code = 3, .expect = "data error: a.jpg: ...FIFO..."},
      {.cat = "predict", .name = "predict: a folder without images", .files = with(run_dir(g.weights, g.sidecar), {{"d/"}}),
       .args = "predict r d", .code = 3, .expect = "data error: d: holds no images (.jpg, .jpeg, .png)"},
      {.cat = "predict", .name = "predict: a checkpoint of another model", .config = changed({{"filters: 4", "filters: 6"}}),
       .files = with(run_dir(g.weights, g.sidecar), {{"rgb4x4.png", fixture("rgb4x4.png")}}), .args = "predict r rgb4x4.png --config c.yaml", .code = 2,
       .expect = st + ": 'conv/kernel' has shape 3x3x3x4, the model's is 3x3x3x6 (does the config match the checkpoint?)"},
      {.cat = "predict", .name = "predict: sidecar class names not a list",
       .files = with(run_dir(g.weights, replaced(g.sidecar, "\"classes\": [", "\"classes\": 7, \"x\": [")), {{"rgb4x4.png", fixture("rgb4x4.png")}}),
       .args = "predict r rgb4x4.png", .code = 3, .expect = "file error: r/checkpoints: no valid checkpoint (1 invalid: " + js + ": bad checkpoint sidecar: ...)"},
      {.cat = "predict", .name = "predict: --top 0", .files = run_dir(g.weights, g.sidecar), .args = "predict r x.png --top 0",
       .expect = "--top: expected a positive number, not '0' (see trainer predict --help)"},

      // ---- init.from ----------------------------------------------------------------------------------
      {.cat = "checkpoint", .name = "init.from: no such file", .config = kBase + "init: {from: none.safetensors}\n",
       .expect = "c.yaml:17:14: no such file: ./none.safetensors"},
      {.cat = "checkpoint", .name = "init.from: a folder", .config = kBase + "init: {from: r}\n", .files = run_dir(g.weights, g.sidecar),
       .expect = "c.yaml:17:14: ./r is a directory; give a .safetensors file"},
      {.cat = "checkpoint", .name = "init.from: not a safetensors file", .config = kBase + "init: {from: c.yaml}\n", .code = 3,
       .expect = "file error: ./c.yaml: corrupt safetensors file at byte 0: the header length ... runs past the end of the file (... bytes): truncated?"},
      {.cat = "checkpoint", .name = "init.from: shapes differ", .config = changed({{"units: 3", "units: 5"}}) + "init: {from: " + st + "}\n",
       .files = run_dir(g.weights, g.sidecar),
       .expect = "c.yaml:17:14: 2 parameter(s) differ in shape: dense/kernel 4x3 in the file, 4x5 in the model, dense/bias 3 in the file, 5 in the model (set init.skip_mismatch: true to keep their initial values)"},
      {.cat = "checkpoint", .name = "init: unknown key", .config = kBase + "init: {from: x, skip: true}\n",
       .expect = "c.yaml:17:...: unknown key 'skip' in the init section..."},

      // ---- checkpoint and callback settings -----------------------------------------------------------
      {.cat = "checkpoint", .name = "checkpoint.best: a metric the run lacks", .config = kBase + "checkpoint: {best: val_accuracy}\n",
       .expect = "c.yaml:17:20: this run has no metric 'val_accuracy'..."},
      {.cat = "checkpoint", .name = "checkpoint.keep 0", .config = kBase + "checkpoint: {keep: 0}\n",
       .expect = "c.yaml:17:20: 'checkpoint.keep' must be between 1 and 1000000, not 0"},
      {.cat = "checkpoint", .name = "early stopping on a missing metric", .config = kBase + "callbacks: {early_stopping: {}}\n",
       .expect = "c.yaml:17:...: this run has no metric 'val_loss'; it has: accuracy, loss, lr (monitor defaults to val_loss, which needs data.val or data.validation_split)"},
      {.cat = "checkpoint", .name = "reduce_lr_on_plateau factor >= 1", .config = kBase + "callbacks: {reduce_lr_on_plateau: {monitor: loss, factor: 2}}\n",
       .expect = "c.yaml:17:...: ReduceLROnPlateau does not support a factor >= 1.0"},
      {.cat = "checkpoint", .name = "callbacks: unknown callback", .config = kBase + "callbacks: {early_stop: {}}\n",
       .expect = "c.yaml:17:13: unknown key 'early_stop' in the callbacks section"},

      // ---- run directory and disk -----------------------------------------------------------------------
      {.cat = "output", .name = "--run-dir not empty", .config = kBase, .files = {{"r/x", "x"}}, .args = "run c.yaml --run-dir r",
       .expect = "--run-dir r: exists and is not empty; runs are never overwritten"},
      {.cat = "output", .name = "--run-dir under a file", .config = kBase, .files = {{"f", "x"}}, .args = "run c.yaml --run-dir f/r",
       .code = 3, .expect = "file error: cannot create run directory f/r: Not a directory"},
      {.cat = "output", .name = "--runs-root not writable", .config = kBase, .args = "run c.yaml --runs-root /proc/self/none",
       .code = 3, .expect = "file error: cannot create /proc/self/none/bad: ..."},
      {.cat = "output", .name = "disk full while writing a checkpoint", .config = kBase, .args = "run c.yaml --run-dir r",
       .env = "TRAINER_TEST_WRITE_LIMIT=" + std::to_string(g.config.size() + 100), .code = 3, .expect = "file error: cannot write r/checkpoints/epoch-0001.safetensors: No space left on device"},
  };
}

}  // namespace bad_inputs
