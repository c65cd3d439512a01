// Rank threads: a body per rank on a thread of its own, the first failure ending the others (their
// collectives aborted, or the whole multi-process job) and rethrown with its exit code's type.
#pragma once
#include <functional>
#include <string>

namespace trainer {

// Runs body(r) for r in [0, n) on one thread each (rank 0 on the calling thread). The first
// failure wins: in a multi-process job it ends the job at once (abort_job: no process is left
// waiting in a collective for this one); else abort(why) wakes the ranks waiting in collectives.
// It is then rethrown: data, file, config and device errors as they are; another error, with more
// than one rank, as a DeviceError "<name(r)> failed: <what>" (exit 4).
void run_rank_threads(int n, const std::function<void(int)>& body, const std::function<std::string(int)>& name,
                      const std::function<void(const std::string&)>& abort);

}  // namespace trainer
