// libFuzzer target for the checkpoint sidecar (the JSON next to each checkpoint's weights) via read_checkpoint.
//
// Each input is one sidecar's text, written as ckpt/step.json in the fuzzer's scratch directory
// next to a valid ckpt/step.safetensors (written once at start), and read by read_checkpoint:
// JSON, format and version, the training position, the weights file's name, size and CRC-32.
// FileError (exit 3) is the documented refusal; anything else is a crash.
// With TRAINER_FUZZ_SEED_DIR set, start-up also writes a valid sidecar there (the seed
// scripts/fuzz.sh gives this target: its byte count and CRC match the weights written here).
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>

#include "core/checkpoint/checkpoint.h"
#include "core/io/safetensors.h"
#include "fuzz_util.h"

using namespace trainer;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::scratch_dir() + "/ckpt";
  std::filesystem::create_directories(dir);
  SafeTensorsWriter w;
  const float values[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
  w.add_f32("dense/kernel", {2, 3}, values);
  w.set_metadata("format", "trainer-checkpoint");
  const auto [bytes, crc] = w.write(dir + "/step.safetensors");
  if (const char* seeds = std::getenv("TRAINER_FUZZ_SEED_DIR")) {
    std::ofstream(std::string(seeds) + "/step.json") << fmt::format(
        R"({{"format": "trainer-checkpoint", "format_version": 1, "epoch": 1, "step_in_epoch": 3, "global_step": 35,
"optimizer_steps": 35, "epoch_sums": {{"loss_sum": 2.5, "correct": 40, "count": 96}},
"rng": {{"seed": 7, "kind": "philox"}}, "replicas": 1, "global_batch": 32, "lr_factor": 1.0,
"config_hash": "0123456789abcdef", "reason": "steps", "last_metrics": {{"epoch": 1, "loss": 1.9, "val_accuracy": null}},
"callbacks": {{"early_stopping": {{"best": 0.5, "wait": 1}}}},
"weights": {{"file": "step.safetensors", "bytes": {}, "crc32": "{:08x}"}},
"normalization": {{"kind": "none", "shape": []}}}}
)",
        bytes, crc);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("ckpt/step.json", data, size);
  fuzz::refusals_expected([&] {
    CheckpointInfo c = read_checkpoint(path);
    if (c.state.replicas < 1 || c.state.global_batch < 1) __builtin_trap();  // checked by the reader
  });
  return 0;
}
