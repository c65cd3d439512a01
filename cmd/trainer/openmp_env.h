// trainer's default for libgomp's spinning (GOMP_SPINCOUNT), set before libgomp loads.
#pragma once

namespace trainer::cli {

constexpr const char* kDefaultSpinCount = "3000";

// When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets GOMP_SPINCOUNT and executes this
// program again with the same arguments (it does not return then). The first thing main() does.
void default_openmp_spin(char** argv);

}  // namespace trainer::cli
