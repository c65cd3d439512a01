// Peer checks: trainer against Keras 3's definitions written by hand in PyTorch (tests/e2e/keras_peer/): optimizers, every layer type and loss, schedules and replicas; each with negative controls.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <sys/wait.h>

#include "cli.h"
#include "skip.h"

namespace {

// Where trainer runs: `threads` compute threads on the CPU (TRAINER_PEER_THREADS), or GPU 0 in
// strict fp32 (no TF32) when `gpu` (TRAINER_PEER_ARGS; a Gpu skip where none is visible).
struct On {
  int threads = 1;
  bool gpu = false;
};

// Runs tests/e2e/keras_peer/<script> on trainer (with `pass`, "fp32" or "bf16", as its third
// argument when given); prints its table (WARN, so CI's log keeps it) and checks that it held.
// Exit 77: the script's "SKIPPED (<kind>): <reason>" line, a skip of that kind (torch missing:
// package; trainer refusing bf16 on this CPU: cpu-feature).
void peer_check(const std::string& script, const std::string& title, const std::string& pass = "", On on = {}) {
  if (e2e::skip_without_python({{"torch", "python3-torch"}, {"numpy", "python3-numpy"}})) return;
  if (on.gpu && e2e::skip_without_gpu()) return;
  const std::string dir = e2e::temp_dir("keras_peer");
  const std::string env = on.gpu ? "TRAINER_PEER_ARGS='--gpus 0 --set devices.tf32=false' "
                                 : "TRAINER_PEER_THREADS=" + std::to_string(on.threads) + " ";
  const std::string cmd = env + e2e::python() + " '" TRAINER_SOURCE_DIR "/tests/e2e/keras_peer/" + script + "' '" +
                          TRAINER_BINARY "' '" + dir + "' " + pass + " >'" + dir + "/table.txt' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string table = e2e::read_file(dir + "/table.txt");
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) {
    const size_t at = table.find("SKIPPED (");
    const std::string line = at == std::string::npos ? table : table.substr(at, table.find('\n', at) - at);
    const size_t colon = line.find("): ");
    const std::string why = colon == std::string::npos ? line : line.substr(colon + 3);
    if (line.rfind("SKIPPED (cpu-feature)", 0) == 0) TRAINER_SKIP(CpuFeature, why);
    TRAINER_SKIP(Package, why);
  }
  WARN(title << ":\n" << table);
  CHECK(code == 0);
}

}  // namespace

// Each script at 1 and 2 compute threads (the kernels split their sums by thread), and the layers
// and optimizers on the GPU where one is visible.
const char* kOptimizers = "Keras 3 peer, optimizers (max relative error of every weight and optimizer slot after 3 steps)";
const char* kLayers = "Keras 3 peer, layers and losses (weights, moving statistics, training and validation loss after 2 steps)";
const char* kLayersBf16 = "Keras 3 peer, layers and losses in bf16 (each tensor's update after 2 steps)";
const char* kTraining = "Keras 3 peer, schedules and replicas (weights, slots, epoch loss and accuracy)";

TEST_CASE("e2e keras peer: sgd, adam, adamw and rmsprop weights and slots match Keras 3's formulas within 1e-4") {
  peer_check("optimizers.py", kOptimizers, "", On{1});
}

TEST_CASE("e2e keras peer, 2 threads: sgd, adam, adamw and rmsprop match Keras 3's formulas within 1e-4") {
  peer_check("optimizers.py", kOptimizers, "", On{2});
}

TEST_CASE("e2e keras peer, GPU: sgd, adam, adamw and rmsprop match Keras 3's formulas within 1e-4") {
  peer_check("optimizers.py", kOptimizers, "", On{1, true});
}

TEST_CASE("e2e keras peer: every layer type and loss matches Keras 3 within 1e-4, and flipped conventions do not") {
  peer_check("layers.py", kLayers, "fp32", On{1});
}

TEST_CASE("e2e keras peer, 2 threads: every layer type and loss matches Keras 3 within 1e-4") {
  peer_check("layers.py", kLayers, "fp32", On{2});
}

TEST_CASE("e2e keras peer, GPU: every layer type and loss matches Keras 3 within 1e-4") {
  peer_check("layers.py", kLayers, "fp32", On{1, true});
}

TEST_CASE("e2e keras peer: every layer type and loss in bf16 moves the weights as Keras 3 does, within bf16's bound") {
  peer_check("layers.py", kLayersBf16, "bf16", On{1});
}

TEST_CASE("e2e keras peer, 2 threads: every layer type and loss in bf16 moves the weights as Keras 3 does") {
  peer_check("layers.py", kLayersBf16, "bf16", On{2});
}

TEST_CASE("e2e keras peer, GPU: every layer type and loss in bf16 moves the weights as Keras 3 does") {
  peer_check("layers.py", kLayersBf16, "bf16", On{1, true});
}

TEST_CASE("e2e keras peer: schedules, the epoch's loss, lr_scaling and sync_bn match Keras 3 within 1e-4") {
  peer_check("training.py", kTraining, "", On{1});
}

TEST_CASE("e2e keras peer, 2 threads: schedules, the epoch's loss, lr_scaling and sync_bn match Keras 3 within 1e-4") {
  peer_check("training.py", kTraining, "", On{2});
}
