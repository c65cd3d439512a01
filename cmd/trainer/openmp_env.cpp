// trainer's OpenMP environment: how long an idle thread spins, and no binding; libgomp must see both when it is loaded.
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
//
// No binding. With OMP_PROC_BIND or OMP_PLACES set, libgomp binds the initial thread to the first
// place when it loads. Every thread trainer starts inherits that one core: the replicas' and stages'
// compute threads, and the OpenMP teams they start, which libgomp does not spread from there. On 2
// cores, MiniGoogLeNet bf16 `--threads 2` ran at 25 img/s with OMP_PROC_BIND=close OMP_PLACES=cores
// (1.0 core busy) against 265 without, `--threads 2` fp32 with OMP_PLACES=cores alone at 68 against
// 140, and `--cpu 2 --threads 1` with OMP_PROC_BIND=true at 70 (both replicas on one core). So trainer
// removes both variables, starts again and says so in one line. taskset or numactl still restrict
// the process to cores of one's choice. GOMP_CPU_AFFINITY does not bind the threads trainer starts
// (136 img/s with GOMP_CPU_AFFINITY=0-1): it is left as it is.
#include "cmd/trainer/openmp_env.h"

#include <dlfcn.h>
#include <omp.h>
#include <sched.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace trainer::cli {

namespace {
constexpr const char* kDropped = "TRAINER_OMP_BINDING_REMOVED";  // what prepare_openmp removed

// The places of the OpenMP runtime that bound this thread. libgomp (oneDNN's, loaded with it) made
// its places from the process's mask before binding; in a clang build trainer's own omp_* calls go
// to LLVM's libomp, whose places come from the mask libgomp had already narrowed to one core (the
// ASan build's e2e test saw `trainer devices` keep 1 of 2 cores). So libgomp's functions when it is
// loaded, the program's own otherwise.
struct Places {
  int (*count)() = omp_get_num_places;
  int (*procs)(int) = omp_get_place_num_procs;
  void (*ids)(int, int*) = omp_get_place_proc_ids;
};

Places binding_places() {
  Places p;
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!gomp) return p;
  auto count = reinterpret_cast<int (*)()>(dlsym(gomp, "omp_get_num_places"));
  auto procs = reinterpret_cast<int (*)(int)>(dlsym(gomp, "omp_get_place_num_procs"));
  auto ids = reinterpret_cast<void (*)(int, int*)>(dlsym(gomp, "omp_get_place_proc_ids"));
  if (count && procs && ids) p = {count, procs, ids};
  return p;  // (the handle stays open: the library was loaded before and stays so)
}

// libgomp has already bound this thread to its first place, and the program executed next keeps
// that mask: give it back every CPU of every place (the CPUs the places were made of).
void unbind_from_places() {
  const Places places = binding_places();
  cpu_set_t all;
  CPU_ZERO(&all);
  int n = 0;
  for (int p = 0; p < places.count(); ++p) {
    std::vector<int> ids(size_t(places.procs(p)));
    places.ids(p, ids.data());
    for (int id : ids)
      if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &all), ++n;
  }
  if (n > 0) sched_setaffinity(0, sizeof all, &all);
}
}  // namespace

void prepare_openmp(char** argv) {
  bool again = false;
  const char* bind = std::getenv("OMP_PROC_BIND");
  const char* places = std::getenv("OMP_PLACES");
  const bool unbound = bind && strcasecmp(bind, "false") == 0;  // places without binding bind nothing
  if (!unbound && (bind || places)) {
    std::string was;
    if (bind) was = std::string("OMP_PROC_BIND=") + bind;
    if (places) was += std::string(was.empty() ? "" : " ") + "OMP_PLACES=" + places;
    setenv(kDropped, was.c_str(), 1);
    unsetenv("OMP_PROC_BIND");
    unsetenv("OMP_PLACES");
    unbind_from_places();
    again = true;
  }
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") &&
      setenv("GOMP_SPINCOUNT", kDefaultSpinCount, 1) == 0) {
    setenv("TRAINER_GOMP_SPINCOUNT_DEFAULT", "1", 1);  // `trainer devices` says whose value it is
    again = true;
  }
  if (!again) return;
  // By the executable's own path: the kernel names a process after the file it executed, and
  // "/proc/self/exe" would make it `exe` to ps, top, pgrep and killall. /proc/self/exe itself
  // when that path is gone (the binary replaced by a rebuild while it runs: "... (deleted)").
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
    execv(path, argv);
  }
  execv("/proc/self/exe", argv);
  unsetenv(kDropped);  // it failed (no /proc): libgomp has its defaults, and the binding, then
}

std::string binding_note() {
  const char* was = std::getenv(kDropped);
  if (!was || !*was || std::getenv("OMP_PROC_BIND") || std::getenv("OMP_PLACES")) return "";
  return std::string("note: ") + was + " not applied: trainer's compute threads would all inherit the one core "
         "libgomp binds the first thread to; threads are not bound (restrict the cores with taskset or numactl)";
}

}  // namespace trainer::cli
