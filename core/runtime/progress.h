// Progress: where each rank of a training job is (step, phase, since when), written by the ranks'
// own threads and read by the watchdog. The board lives in shared memory (/dev/shm) across a job's
// processes on one machine (mpirun, srun), so a process that is stopped or gone is still seen at
// the place it last reached.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainer {

enum class Phase : int32_t {
  Idle,        // between steps (the loop's own work, callbacks)
  Input,       // waiting for the loader's next batch
  Forward,     // forward and the loss
  Backward,    // backward (gradient buckets posted as they are final)
  AllReduce,   // waiting for gradient bucket `a` of `b` (in wait order)
  Optimizer,   // the update
  StepEnd,     // the step's end with every rank: batch-norm statistics from rank 0, loss sums, the stop agreement
  Validation,  // validation batch `a`
  Checkpoint,  // writing a checkpoint (rank 0 of process 0)
  Agreement,   // agreeing with the other ranks on how a step runs (launched, or as one recorded program)
};

// A rank in such a phase waits for the others (a collective), so it is not the one that stopped them.
inline bool waits_for_others(Phase p) { return p == Phase::AllReduce || p == Phase::StepEnd || p == Phase::Agreement; }

// One rank's place. Lock-free atomics: safe in memory shared by processes.
struct ProgressSlot {
  std::atomic<int64_t> step{-1};      // global step (micro-batch) in progress or last begun
  std::atomic<int64_t> since_ns{0};   // CLOCK_MONOTONIC when the phase began (one clock for the machine)
  std::atomic<int32_t> phase{0};
  std::atomic<int32_t> a{0}, b{0};    // the phase's detail (bucket a of b, validation batch a)
  std::atomic<int32_t> pid{0};        // the process holding the rank
  std::atomic<int32_t> used{0};       // 1 once the rank has reported
};

// What a slot says, read at one time.
struct RankPlace {
  int rank = 0;
  int64_t step = -1;
  Phase phase = Phase::Idle;
  int a = 0, b = 0;
  int pid = 0;
  double seconds = 0;  // in this phase so far
  bool used = false;
};

// The job's board: `ranks` slots (every process's replicas), this process's from `first`. In a
// job of several processes with a job id (PMIX_NAMESPACE from Open MPI, SLURM_JOB_ID.STEP from
// srun), the slots are shared in /dev/shm/trainer-progress-<id> (process 0 removes the file once
// every process has mapped it: remove_file); otherwise, or when that file cannot be made, they
// are this process's own (`shared()` false: other processes' ranks are not seen).
class ProgressBoard {
 public:
  ProgressBoard(int ranks, int first, int local, bool multi_process);
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  bool shared() const { return shared_; }
  int ranks() const { return ranks_; }
  int first() const { return first_; }
  int local() const { return local_; }
  std::vector<RankPlace> read() const;

  // The board ranks mark on (null when none is open: tests, bench).
  static ProgressBoard* current();

  ProgressSlot& slot(int rank) { return slots_[rank]; }
  // Process 0 removes the shared file (the mappings stay): call once every process has opened it.
  void remove_file();

 private:
  int ranks_, first_, local_;
  bool shared_ = false, owner_ = false;
  std::string path_;
  ProgressSlot* slots_ = nullptr;
  std::unique_ptr<ProgressSlot[]> own_;  // when not shared
  size_t bytes_ = 0;
};

// Marks global rank `rank` as entering `phase` now (no-op without a board).
void mark_phase(int rank, Phase phase, int a = 0, int b = 0);
// Marks `rank` as beginning global step `step` (the phase unchanged).
void mark_step(int rank, int64_t step);

// "forward", "all-reduce of gradient bucket 2 of 3", ...
std::string phase_text(Phase p, int a, int b);
int64_t monotonic_ns();

}  // namespace trainer
