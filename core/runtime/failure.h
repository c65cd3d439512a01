// Failure: how an error ends the program — its documented exit code and its one stderr line —
// and, in a multi-process job, ending every process at once.
#pragma once
#include <exception>
#include <string>

namespace trainer {

enum ExitCode {
  kExitOk = 0,
  kExitInternal = 1,
  kExitUsage = 2,
  kExitData = 3,
  kExitDevice = 4,
  kExitStalled = 5,  // the watchdog: a rank made no progress for train.watchdog_s
  kExitInterrupted = 130
};

struct Failure {
  int code = kExitInternal;
  std::string line;  // "c.yaml:3:5: ...", "data error: ...", "device error: ...", "error: ..."
  // Every process of the job raised it alike (processes that disagree at start, agreement.h): none
  // waits for another, so each prints and exits with `code`, and the job needs no abort.
  bool everywhere = false;
};

// Config errors exit 2; data and file errors 3; device and communication errors 4; others 1;
// processes that disagree at start, the code of what differs (2 or 3).
Failure describe_failure(std::exception_ptr e);

// Prints the line on stderr, prefixed "process R/N: " in a multi-process job.
void report(const Failure& f);

// Multi-process jobs: prints the line (naming this process) and aborts the whole job (MPI_Abort),
// so no process is left waiting in a collective for this one. A lone process just exits.
[[noreturn]] void abort_job(const Failure& f);

}  // namespace trainer
