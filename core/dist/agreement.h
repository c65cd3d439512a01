// Agreement: what every process of a job must hold equal (config, replicas, data, steps), compared
// once at start; a difference ends every process alike with one line naming it and each one's value.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer {

// One fact that must be the same in every process: its name as the message says it ("train set
// size"), this process's value as text, the exit code a difference ends with (2: config, 3: data)
// and what the user must make equal ("every process must see the same data").
struct AgreedField {
  std::string name, value;
  int code = 2;
  std::string hint;
};

// Raised by every process of the job alike, from the same gathered records, so no process is left
// waiting for another: the CLI prints the line and exits with code() without aborting the job.
class DisagreementError : public std::runtime_error {
 public:
  DisagreementError(int code, const std::string& line) : std::runtime_error(line), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// The line for the first field (in the records' order) whose value is not the same in every
// process, e.g. "processes disagree: train set size 16 on process 0, 12 on process 1 (every process
// must see the same data)"; "" when all agree. `records[p]` is process p's, every record naming
// the same fields in the same order. `code`, when given, receives that field's exit code.
std::string disagreement(const std::vector<std::vector<AgreedField>>& records, int* code = nullptr);

// Gathers every process's `fields` (collective over MPI_COMM_WORLD: every process calls it once,
// from one thread, with the same names in the same order) and throws DisagreementError, in every
// process, when one differs. One process (or a build without MPI): nothing to compare.
void check_processes_agree(const std::vector<AgreedField>& fields);

}  // namespace trainer
