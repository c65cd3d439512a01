// trainer's OpenMP environment (libgomp's spinning, no thread binding), set before libgomp loads.
#pragma once

#include <string>

namespace trainer::cli {

constexpr const char* kDefaultSpinCount = "3000";

// The first thing main() does. Executes this program again with the same arguments (and does not
// return then) when the environment must change before libgomp reads it:
// - neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets GOMP_SPINCOUNT;
// - OMP_PROC_BIND (other than false) or OMP_PLACES is set: removes both, so that no thread is bound
//   (see binding_note()).
void prepare_openmp(char** argv);

// After prepare_openmp: the one-line note on the binding it removed, or "" when it removed none.
std::string binding_note();

}  // namespace trainer::cli
