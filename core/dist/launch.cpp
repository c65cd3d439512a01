// Launcher environments and this process's place in the job.
#include "core/dist/launch.h"

#include <cstdlib>
#include <string>

namespace trainer {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == '\0' && x >= 0 && x < (1 << 24)) ? int(x) : fallback;
}

Launch& current() {
  static Launch l;
  return l;
}

}  // namespace

Launch detect_launch() {
  Launch l;
  struct Vars {
    const char *rank, *size, *local, *name;
  };
  for (Vars v : {Vars{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
                 Vars{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "pmi"},
                 Vars{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "slurm"}}) {
    int size = env_int(v.size, 0);
    if (size < 1 || !std::getenv(v.rank)) continue;
    l.size = size;
    l.rank = env_int(v.rank, 0);
    l.node_rank = env_int(v.local, 0);
    l.launcher = v.name;
    break;
  }
  return l;
}

const Launch& this_process() { return current(); }
void set_this_process(const Launch& l) { current() = l; }

}  // namespace trainer
