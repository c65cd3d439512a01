// Peer check: trainer's optimizers (convention keras) against Keras 3's formulas written by hand in PyTorch (tests/e2e/keras_peer/optimizers.py), with convention pytorch as the negative control.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <sys/wait.h>

#include "cli.h"

TEST_CASE("e2e keras peer: sgd, adam, adamw and rmsprop weights and slots match Keras 3's formulas within 1e-4") {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
    WARN("skipped: /usr/bin/python3 cannot import torch and numpy (Debian: python3-torch python3-numpy)");
    return;
  }
  const std::string dir = e2e::temp_dir("keras_peer");
  const std::string cmd = "/usr/bin/python3 '" TRAINER_SOURCE_DIR "/tests/e2e/keras_peer/optimizers.py' '" TRAINER_BINARY
                          "' '" + dir + "' >'" + dir + "/table.txt' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string table = e2e::read_file(dir + "/table.txt");
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) {
    WARN("skipped: " << table);
    return;
  }
  WARN("Keras 3 peer (max relative error of every weight and optimizer slot after 3 steps):\n" << table);
  CHECK(code == 0);
}
