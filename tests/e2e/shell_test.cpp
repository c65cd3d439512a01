// A shell user's day with trainer: the running process's name (ps, top, pgrep, killall).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "cli.h"

TEST_CASE("e2e shell: a running trainer is named trainer to ps, pgrep -x and killall, not exe") {
  // trainer starts itself again to set OpenMP's environment (openmp_env.cpp): by its own path, so
  // that the kernel names the process after it. A run in the background, its name read from
  // /proc and by pgrep -x once it has started training, then stopped with SIGINT.
  const std::string dir = e2e::temp_dir("shell_name");
  const std::string script = "cd '" + dir + "' && unset OMP_WAIT_POLICY GOMP_SPINCOUNT; '" TRAINER_BINARY "' run '"
                             TRAINER_SOURCE_DIR "/configs/smoke.yaml' --set train.epochs=500 --run-dir r >out.txt 2>&1 & "
                             "pid=$!; for i in $(seq 300); do [ -s r/train.log ] && break; sleep 0.1; done; "
                             "cat /proc/$pid/comm >comm.txt; pgrep -x trainer >pgrep.txt; kill -INT $pid; wait $pid; "
                             "echo $pid >pid.txt";
  REQUIRE(std::system(script.c_str()) == 0);
  const std::string pid = e2e::read_file(dir + "/pid.txt");
  INFO("pid " << pid << ", output: " << e2e::read_file(dir + "/out.txt"));
  CHECK(e2e::read_file(dir + "/comm.txt") == "trainer\n");
  CHECK(("\n" + e2e::read_file(dir + "/pgrep.txt")).find("\n" + pid) != std::string::npos);
}
