// `trainer run --max-restarts N`: the run in a child process, restarted from its newest checkpoint
// when it fails for a reason that is not the user's (torchrun's elastic restart, one machine).
#pragma once
#include <string>
#include <vector>

namespace trainer::cli {

struct RestartPlan {
  int max_restarts = 0;
  std::string run_dir;             // the first attempt's (made by the caller, empty); later ones beside it
  std::string resume;              // the user's --resume, for the first attempt ("" for none)
  std::vector<std::string> args;   // the child's `run` arguments, without --resume and --run-dir
};

// Whether a child's wait status is retried: exit codes 4 (device or communication) and 5 (the
// watchdog), and death by a signal that is not a stop request (KILL: a lost process or the OOM
// killer; SEGV, ABRT, BUS, ...). Exit 0, 1 (an internal error would recur), 2 (config), 3 (data)
// and 130, and INT/TERM/HUP/USR1/PIPE, are the run's answer.
bool retryable(int wait_status);
// "exited 5", "was killed by signal 9 (Killed)".
std::string describe_status(int wait_status);

// Runs the attempts; returns the exit code of the last (128 + signal for a signal). Each restart is
// one line on stderr and in <run_dir>/restarts.log.
int run_with_restarts(const RestartPlan& plan);

}  // namespace trainer::cli
