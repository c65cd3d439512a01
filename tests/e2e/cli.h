// Helpers for end-to-end tests: run the trainer binary, capture exit code and output.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace e2e {

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs `trainer <args>` (args are passed to /bin/sh as written) in `cwd` (default: a fresh
// temporary directory shared by the test executable).
// `prefix` goes before the binary (environment assignments, `timeout 60`).
Result trainer(const std::string& args, const std::string& cwd = "", const std::string& prefix = "");
// `trainer <args>` run directly (fork + exec, no shell) in `cwd`, measured: wall time from fork
// to exit and the child's peak resident set (wait4's ru_maxrss).
struct Measured : Result {
  double seconds = 0;
  double max_rss_mib = 0;
};
Measured trainer_measured(const std::vector<std::string>& args, const std::string& cwd);
// A fresh, empty temporary directory.
std::string temp_dir(const std::string& tag);
void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);
// The last row of a run's metrics.csv as column -> value (-1 for an empty cell).
std::map<std::string, double> last_metrics(const std::string& run_dir);
// A checkpoint's model parameters by name: its tensors but the optimizer state, normalisation
// data, moving average and early stopping's kept copy.
std::map<std::string, std::vector<float>> model_weights(const std::string& safetensors_file);
// The last non-empty line of `out` parsed as JSON (a --json line); throws when it is not JSON.
nlohmann::json last_json(const std::string& out);
// How far a bench --json line's ceiling_fraction may be from gflops_per_sec / `ceiling` when both
// are right: the line rounds GFLOP/s to 0.1 and the fraction to 0.001 (under ASan a 5 GFLOP/s
// smoke step made a 1% tolerance fail on rounding alone: 0.045 printed for 5.0 / 113.3 = 0.0441).
double fraction_rounding(const nlohmann::json& bench_line, double ceiling);
// The folder with the shared real data (TRAINER_DATA, default <repo>/../shared/data); "" when absent.
std::string shared_data_dir();

// mpirun (Open MPI) on this machine: whether it is installed, and the environment that keeps it on
// shared memory (no TCP probing, no ssh launcher, no cross-memory attach, which containers
// refuse; full malloc stacks under ASan so tests/lsan.supp can name Open MPI's own leaks), to put
// before `mpirun`; mpirun() adds `mpirun` with the flags a CI container needs (root, more
// processes than its 2 cores), `wrapper` (e.g. "timeout 60 ") before it; the caller adds -np N.
bool have_mpirun();
// The Python the tests run their independent readers and peers with: TRAINER_PYTHON, else Debian's
// /usr/bin/python3 (whose packages scripts/setup.sh installs). The GPU machine's own python3 has
// PyTorch with CUDA: gpu-check's e2e phase points TRAINER_PYTHON at it.
std::string python();
std::string mpi_env();
std::string mpirun(const std::string& wrapper = "");

// Skips (skip.h, Missing::Package) that tell the caller to return: true, after recording the skip,
// when mpirun is missing; when python() cannot import one of the modules (pairs of module
// and the Debian package that has it), naming those it cannot import; when a command is missing;
// (Missing::Gpu) when `trainer devices` lists no GPU 0, with its reason.
//   if (e2e::skip_without_mpirun()) return;
bool skip_without_mpirun();
bool skip_without_gpu();
bool skip_without_python(const std::vector<std::pair<std::string, std::string>>& modules);
bool skip_without_command(const std::string& command, const std::string& package);

}  // namespace e2e
