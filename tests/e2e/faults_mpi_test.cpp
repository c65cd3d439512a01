// Faults of mpirun jobs that would lose work: processes that disagree at start (data, config,
// devices) stop in one line each, bounded; a signal to mpirun or to the processes stops every
// process at one step with a checkpoint that loads; kill -9 of one process ends the job in seconds.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "cli.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

const std::string kBinary = "'" TRAINER_BINARY "'";
const std::string kSmoke = "'" TRAINER_SOURCE_DIR "/configs/smoke.yaml'";

// A tiny classifier of 4 floats, trained on x.npy / y.npy of the directory each process runs in:
// the same config (the same hash) in every process, whatever data its directory holds.
const std::string kNpyConfig = R"(name: agree
model:
  input: [4]
  layers:
    - {name: dense, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: npy, x: x.npy, labels: y.npy}
train: {epochs: 1, batch_size: 2}
optimizer: {type: sgd, lr: 0.1}
)";

// A .npy file (version 1) of `shape` and raw little-endian `data`.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  h.append(63 - (10 + h.size()) % 64, ' ');
  h += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 255) + char(h.size() >> 8) + h + data;
}

// `dir`/x.npy (n samples of 4 floats, scaled by `scale`) and `dir`/y.npy (labels 0, 1, 2, 0, ...).
void write_set(const std::string& dir, int n, float scale) {
  fs::create_directories(dir);
  std::vector<float> x;
  std::string y;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x.push_back(scale * float(i * 4 + j));
    y += char(i % 3);
  }
  std::string xb(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
  e2e::write_file(dir + "/x.npy", npy("<f4", "(" + std::to_string(n) + ", 4)", xb));
  e2e::write_file(dir + "/y.npy", npy("|u1", "(" + std::to_string(n) + ",)", y));
}

struct Job {
  int code = -1;
  long ms = 0;
  std::string out;  // stdout, then stderr
  std::string err;  // stderr alone
};

// Runs `command` (a shell command line) in `dir` with its output in job.out and job.err; `then`, when given,
// runs once the job's process 0 has finished its first epoch ($job is mpirun's pid), and ms is
// the time from then to the job's end (else from the start).
Job run_job(const std::string& dir, const std::string& command, const std::string& then = "") {
  std::string script = "cd '" + dir + "' && (" + command + " >job.out 2>job.err & job=$!; start=$(date +%s%N); ";
  if (!then.empty())
    script += "for i in $(seq 600); do [ -f run/metrics.csv ] && [ \"$(wc -l <run/metrics.csv)\" -ge 2 ] && break; sleep 0.1; done; " +
              then + "; start=$(date +%s%N); ";
  script += "wait $job; echo $? >job.rc; echo $(( ($(date +%s%N) - start) / 1000000 )) >job.ms)";
  REQUIRE(std::system(script.c_str()) == 0);
  Job j;
  j.err = e2e::read_file(dir + "/job.err");
  j.out = e2e::read_file(dir + "/job.out") + j.err;
  j.code = std::stoi(e2e::read_file(dir + "/job.rc"));
  j.ms = std::stol(e2e::read_file(dir + "/job.ms"));
  return j;
}

// Two processes, each its own command line (Open MPI's MPMD form); a hang fails after 60 s.
std::string two_processes(const std::string& first, const std::string& second) {
  return e2e::mpirun("timeout -k 5 60 ") + " -np 1 " + first + " : -np 1 " + second;
}

// Lists the pids of the trainer processes of the job running in `dir`: their command lines start
// with the binary (those of the shells, timeout and mpirun do not) and name `dir`, which no other
// test's do.
std::string trainer_pids(const std::string& dir) { return "pgrep -f '^[^ ]*trainer run .*" + dir + "/run'"; }

// A long 2-process run of smoke.yaml writing `dir`/run, each process through `wrap` (a command
// before the binary), with a checkpoint after every epoch.
// Each process through a shell that notes its exit code in `dir`/rank<R>.rc and exits with it. The
// shell ignores TERM (the trainer sets its own handler): when the first process exits non-zero,
// mpirun ends the others with TERM, then KILL a second later, and a process that was itself
// exiting 130 at that moment must still get its code noted.
std::string rc_wrapper(const std::string& dir) {
  return "sh -c 'trap \"\" TERM; \"$@\"; rc=$?; echo $rc >" + dir + "/rank$OMPI_COMM_WORLD_RANK.rc; exit $rc' sh ";
}

std::string long_run(const std::string& dir, const std::string& wrap = "") {
  return e2e::mpirun("timeout -k 5 120 ") + " -np 2 " + wrap + kBinary + " run " + kSmoke +
         " --set train.epochs=500 --cpu 1 --threads 1 --run-dir '" + dir + "/run'";
}

// The newest checkpoint of `dir`/run loads: `trainer eval` of the run directory succeeds. After
// an interrupt (`job_out` has process 0's "Interrupted ...: checkpoint PATH"), it is that one.
void check_newest_checkpoint_loads(const std::string& dir, const std::string& job_out = "") {
  e2e::Result ev = e2e::trainer("eval run --threads 1", dir);
  INFO(ev.out << ev.err);
  CHECK(ev.code == 0);
  CHECK_THAT(ev.out, Contains("Checkpoint: "));
  if (size_t at = job_out.find("Interrupted "); at != std::string::npos) {
    size_t from = job_out.find(": checkpoint ", at), end = job_out.find('\n', at);
    REQUIRE(from < end);
    size_t stop = job_out.find(".safetensors", from);  // the line may go on: "(a resume validates again)"
    REQUIRE(stop < end);
    std::string path = job_out.substr(from + 13, stop + 12 - from - 13);
    CHECK_THAT(ev.out, Contains("/checkpoints/" + fs::path(path).filename().string() + " "));
  }
}

}  // namespace

TEST_CASE("faults mpi: processes whose data differ stop at start, naming the field and each one's value, exit 3") {
  if (e2e::skip_without_mpirun()) return;
  std::string dir = e2e::temp_dir("faults_data");
  e2e::write_file(dir + "/agree.yaml", kNpyConfig);
  write_set(dir + "/a", 16, 1.f);
  write_set(dir + "/b", 12, 1.f);   // fewer samples: fewer steps per epoch, all-reduces of different steps
  write_set(dir + "/c", 16, -1.f);  // as many samples, other values
  auto job = [&](const std::string& second) {
    const std::string run = kBinary + " run '" + dir + "/agree.yaml' --cpu 1 --threads 1 --run-dir '" + dir + "/run'";
    return run_job(dir, two_processes("--wdir a " + run, "--wdir " + second + " " + run));
  };
  Job size = job("b");
  INFO(size.out);
  CHECK(size.code == 3);
  CHECK(size.ms < 30000);
  const std::string line = "processes disagree: train set size 16 on process 0, 12 on process 1 (every process must see the same data)";
  CHECK_THAT(size.out, Contains("process 0/2: " + line));
  CHECK_THAT(size.out, Contains("process 1/2: " + line));
  CHECK_FALSE(fs::exists(dir + "/run/checkpoints"));

  Job content = job("c");
  INFO(content.out);
  CHECK(content.code == 3);
  CHECK_THAT(content.out, Contains("process 0/2: processes disagree: train data fingerprint"));
  CHECK_THAT(content.out, Contains("process 1/2: processes disagree: train data fingerprint"));
}

TEST_CASE("faults mpi: processes given another config or replica count stop at start, naming it, exit 2") {
  if (e2e::skip_without_mpirun()) return;
  std::string dir = e2e::temp_dir("faults_config");
  const std::string run = kBinary + " run " + kSmoke + " --threads 1 --run-dir '" + dir + "/run'";
  // The second process gets another learning rate.
  Job lr = run_job(dir, two_processes(run + " --cpu 1", run + " --cpu 1 --set optimizer.lr=0.5"));
  INFO(lr.out);
  CHECK(lr.code == 2);
  CHECK(lr.ms < 30000);
  for (const char* p : {"process 0/2: ", "process 1/2: "})
    CHECK_THAT(lr.out, Contains(std::string(p) + "processes disagree: config hash ") &&
                           Contains("(every process must get the same config file and --set overrides)"));
  // ... or another replica count.
  Job replicas = run_job(dir, two_processes(run + " --cpu 1", run + " --cpu 2"));
  INFO(replicas.out);
  CHECK(replicas.code == 2);
  CHECK_THAT(replicas.out, Contains("processes disagree: replicas per process 1 on process 0, 2 on process 1"));
}

TEST_CASE("faults mpi: SIGINT to mpirun stops every process at one step with a checkpoint that loads") {
  if (e2e::skip_without_mpirun()) return;
  // Ctrl-C: mpirun (Open MPI 4.1) sends the processes SIGCONT, then SIGTERM a second later
  // (odls_base_sigkill_timeout), then SIGKILL a second after that; the processes stop at the step
  // they agree on, process 0 writes the checkpoint, each says so in one line and exits 130, and
  // mpirun itself exits non-zero (Open MPI 4.1: 1, whatever its processes' codes).
  std::string dir = e2e::temp_dir("faults_sigint");
  Job j = run_job(dir, long_run(dir), "pkill -INT -x mpirun -P $job");  // $job is timeout's
  INFO(j.out);
  WARN("mpirun after SIGINT: exit " << j.code << " after " << j.ms << " ms");
  CHECK(j.code != 0);
  CHECK(j.ms < 10000);  // long before the timeout
  CHECK_THAT(j.out, Contains("Interrupted "));
  CHECK_THAT(j.out, Contains("process 1/2: interrupted ") && Contains("with the whole job; process 0 wrote the checkpoint"));
  // mpirun says nothing and exits 1: each process says on stderr where it stopped.
  CHECK_THAT(j.err, Contains("process 0/2: interrupted (SIGTERM) ") && Contains("with the whole job: checkpoint "));
  CHECK_THAT(j.err, Contains("process 1/2: interrupted (SIGTERM) ") &&
                        Contains("with the whole job; process 0 wrote the checkpoint"));
  check_newest_checkpoint_loads(dir, j.out);
}

TEST_CASE("faults mpi: SIGUSR1 to mpirun is forwarded: every process stops at one step with a checkpoint, mpirun exits 130") {
  if (e2e::skip_without_mpirun()) return;
  // Open MPI forwards USR1 (and USR2) to its processes at once and kills nothing: the agreed stop
  // without mpirun's one-second deadline (what Slurm's --signal=USR1@T reaches through srun/mpirun).
  std::string dir = e2e::temp_dir("faults_usr1");
  Job j = run_job(dir, long_run(dir), "pkill -USR1 -x mpirun -P $job");
  INFO(j.out);
  CHECK(j.code == 130);
  CHECK(j.ms < 10000);
  CHECK_THAT(j.out, Contains("Interrupted (SIGUSR1) "));
  CHECK_THAT(j.out, Contains("process 1/2: interrupted ") && Contains("with the whole job; process 0 wrote the checkpoint"));
  check_newest_checkpoint_loads(dir, j.out);
}

TEST_CASE("faults mpi: SIGINT to the trainer processes stops the job with exit 130 from each and from mpirun") {
  if (e2e::skip_without_mpirun()) return;
  // What a scheduler signalling the job's tasks does: each process gets SIGINT itself, they agree
  // on the step, each exits 130, and so does mpirun (the first non-zero code of its processes).
  std::string dir = e2e::temp_dir("faults_sigint_ranks");
  const std::string wrap = rc_wrapper(dir);
  Job j = run_job(dir, long_run(dir, wrap), "kill -INT $(" + trainer_pids(dir) + ")");
  INFO(j.out);
  CHECK(j.code == 130);
  CHECK(j.ms < 10000);
  CHECK(e2e::read_file(dir + "/rank0.rc") == "130\n");
  CHECK(e2e::read_file(dir + "/rank1.rc") == "130\n");
  CHECK_THAT(j.out, Contains("Interrupted ") && Contains("process 1/2: interrupted "));
  check_newest_checkpoint_loads(dir, j.out);
}

TEST_CASE("faults mpi: a signal during validation stops every process there: each says so and exits 130") {
  if (e2e::skip_without_mpirun()) return;
  // The validation is slowed (300 ms a batch) so that the signal lands in it; before the fix,
  // process 1 left its validation silently and exited 0 (only process 0 took it as an interrupt).
  std::string dir = e2e::temp_dir("faults_sigval");
  const std::string wrap = rc_wrapper(dir);
  const std::string job = e2e::mpirun("TRAINER_TEST_SLOW_VALIDATION=300 timeout -k 5 120 ") + " -np 2 " + wrap + kBinary +
                          " run " + kSmoke + " --set train.epochs=5 --cpu 1 --threads 1 --run-dir '" + dir + "/run'";
  std::string script = "cd '" + dir + "' && (" + job + " >job.out 2>job.err & job=$!; " +
                       "for i in $(seq 1200); do grep -q 'test hook: validating' job.out job.err && break; sleep 0.05; done; " +
                       "sleep 0.1; kill -TERM $(" + trainer_pids(dir) + "); wait $job; echo $? >job.rc)";
  REQUIRE(std::system(script.c_str()) == 0);
  std::string out = e2e::read_file(dir + "/job.out") + e2e::read_file(dir + "/job.err");
  INFO(out);
  CHECK(e2e::read_file(dir + "/job.rc") == "130\n");
  CHECK(e2e::read_file(dir + "/rank0.rc") == "130\n");
  CHECK(e2e::read_file(dir + "/rank1.rc") == "130\n");
  CHECK_THAT(out, Contains("Interrupted (SIGTERM) during the validation of epoch 1: checkpoint "));
  CHECK_THAT(out, Contains("process 1/2: interrupted (SIGTERM) during the validation of epoch 1 with the whole job; process 0 wrote the checkpoint"));
  check_newest_checkpoint_loads(dir, out);
}

TEST_CASE("faults mpi: SIGSTOP of one process: the watchdog names it stopped, writes the last step's checkpoint, and ends the job") {
  if (e2e::skip_without_mpirun()) return;
  std::string dir = e2e::temp_dir("faults_stop");
  const std::string job = e2e::mpirun("timeout -k 5 120 ") + " -np 2 " + kBinary + " run " + kSmoke +
                          " --set train.epochs=500 --set train.watchdog_s=3 --cpu 1 --threads 1 --run-dir '" + dir + "/run'";
  Job j = run_job(dir, job, "kill -STOP $(" + trainer_pids(dir) + " | sort -n | tail -1)");
  INFO(j.out);
  WARN("mpirun after SIGSTOP of one process (train.watchdog_s 3): exit " << j.code << " after " << j.ms << " ms");
  CHECK(j.code == 5);  // MPI_Abort's code
  CHECK(j.ms < 9000);
  // Rank 0 waits for the stopped rank in the gradient all-reduce, or, when the stop lands between
  // steps (seen on a 16-core GPU machine), in the end-of-step exchange.
  CHECK_THAT(j.out, Contains("process 0/2: watchdog: rank 0 (process 0, pid ") &&
                        (Contains(", all-reduce of gradient bucket 1 of 1, for ") || Contains(", end-of-step exchange with the other ranks, for ")));
  CHECK_THAT(j.out, Contains("process 0/2: watchdog: rank 1 (process 1, pid ") && Contains(", stopped): step ") && Contains(" s <- no progress"));
  CHECK_THAT(j.out, Contains("process 0/2: stalled: no progress for ") && Contains("; its process (pid ") && Contains(") is stopped; another rank waits for it"));
  // The last completed step's checkpoint, or the newest one already written when it is as recent
  // (a stop right after an epoch's checkpoint).
  CHECK_THAT(j.out, Contains("process 0/2: watchdog: checkpoint ") ||
                        Contains("process 0/2: watchdog: the newest checkpoint (global step "));
  check_newest_checkpoint_loads(dir);
  std::system(("pkill -KILL -f '^[^ ]*trainer run .*" + dir + "/run' 2>/dev/null").c_str());  // none should be left
}

TEST_CASE("faults mpi: kill -9 of one process ends the job within seconds, and the newest checkpoint loads") {
  if (e2e::skip_without_mpirun()) return;
  std::string dir = e2e::temp_dir("faults_kill");
  // The other process waits in a collective for the dead one; mpirun sees the death and ends it.
  Job j = run_job(dir, long_run(dir), "kill -9 $(" + trainer_pids(dir) + " | sort -n | tail -1)");
  INFO(j.out);
  WARN("mpirun after kill -9 of one trainer process: exit " << j.code << " after " << j.ms << " ms");
  CHECK(j.code != 0);
  CHECK(j.ms < 10000);  // long before the timeout
  CHECK_THAT(j.out, Contains("signal 9"));  // mpirun: "... exited on signal 9 (Killed)."
  check_newest_checkpoint_loads(dir);
}
