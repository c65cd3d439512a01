// Launch: where this process stands in a multi-process job (mpirun, Slurm's srun), found from
// the launcher's environment; one process when there is no launcher.
#pragma once
#include <string>

namespace trainer {

struct Launch {
  int rank = 0, size = 1;   // this process among the job's processes
  int node_rank = 0;        // among the job's processes on this machine
  std::string launcher;     // "mpirun", "slurm", "pmi" or "" (a lone process)
  bool multi() const { return size > 1; }
};

// Reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} (Open MPI's mpirun), PMI_{RANK,SIZE} (MPICH,
// Hydra) or SLURM_{PROCID,NTASKS,LOCALID} (srun). Without them: one process.
Launch detect_launch();

// This process's place, as set once at start-up by main() (after MPI is initialised).
const Launch& this_process();
void set_this_process(const Launch& l);

}  // namespace trainer
