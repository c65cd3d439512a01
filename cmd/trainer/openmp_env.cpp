// How long an idle OpenMP thread spins before it sleeps: trainer's default, which libgomp must see when it is loaded.
//
// Why: with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, a libgomp thread (oneDNN's and our
// kernels' OpenMP runtime) whose parallel region ended spins for 300,000 rounds before it sleeps.
// Alone on the machine that costs nothing; beside another process it takes a core the other needs:
// two `trainer bench --threads 2` on 2 cores ran at 41–47 img/s each against 138 alone (0.6–0.7 of
// the machine together). Spinning 3,000 rounds (a few microseconds) keeps the speed alone (median
// 135.3 vs 135.1 img/s in alternated runs) and gives 65 img/s each side by side (0.95);
// OMP_WAIT_POLICY=passive gives 0.98 side by side but costs 3% alone (131.1).
//
// How: libgomp reads both variables once, in its own constructor, before main() runs. A setenv()
// in main is too late, and so is one in the executable's .preinit_array (glibc's libc initialiser,
// which runs after it, resets environ to the process's initial environment). So when neither is
// set, trainer sets GOMP_SPINCOUNT and executes itself again: same process, same arguments, the
// variable in place before libgomp loads. A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
#include "cmd/trainer/openmp_env.h"

#include <unistd.h>

#include <cstdlib>

namespace trainer::cli {

void default_openmp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", kDefaultSpinCount, 1) != 0) return;
  setenv("TRAINER_GOMP_SPINCOUNT_DEFAULT", "1", 1);  // `trainer devices` says whose value it is
  execv("/proc/self/exe", argv);  // returns only when it failed (no /proc): libgomp's default then
}

}  // namespace trainer::cli
