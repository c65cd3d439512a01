// The progress board: slots in shared memory (or this process's own), marks and their text.
#include "core/runtime/progress.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

namespace trainer {
namespace {

std::atomic<ProgressBoard*> g_board{nullptr};

// The job's id, the same in every process of it; "" outside mpirun/srun.
std::string job_id() {
  if (const char* ns = std::getenv("PMIX_NAMESPACE"); ns && *ns) return ns;
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (job && *job) return fmt::format("{}.{}", job, step ? step : "0");
  return "";
}

bool safe_name(const std::string& s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
  return !s.empty() && s.size() < 100;
}

}  // namespace

int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

ProgressBoard::ProgressBoard(int ranks, int first, int local, bool multi_process)
    : ranks_(ranks), first_(first), local_(local) {
  static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);
  const std::string id = multi_process ? job_id() : "";
  if (!id.empty() && safe_name(id)) {
    path_ = "/dev/shm/trainer-progress-" + id;
    bytes_ = sizeof(ProgressSlot) * size_t(ranks);
    // Every process opens (or makes) the same file; a fresh file reads as zeros, which is each
    // slot's initial state (the atomics' zero bit patterns).
    int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 && ::ftruncate(fd, off_t(bytes_)) == 0) {
      void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        slots_ = static_cast<ProgressSlot*>(p);
        shared_ = true;
        owner_ = first == 0;
      }
    }
    if (fd >= 0) ::close(fd);
  }
  if (!shared_) {
    own_ = std::make_unique<ProgressSlot[]>(size_t(ranks));
    slots_ = own_.get();
  }
  const int64_t now = monotonic_ns();
  for (int r = first; r < first + local && r < ranks; ++r) {
    slots_[r].since_ns.store(now);
    slots_[r].phase.store(int32_t(Phase::Idle));
    slots_[r].step.store(-1);
    slots_[r].pid.store(int32_t(::getpid()));
    slots_[r].used.store(1);
  }
  g_board.store(this);
}

ProgressBoard::~ProgressBoard() {
  g_board.store(nullptr);
  if (shared_) {
    ::munmap(slots_, bytes_);
    if (owner_) ::unlink(path_.c_str());
  }
}

void ProgressBoard::remove_file() {
  if (shared_ && owner_) ::unlink(path_.c_str());
  owner_ = false;
}

ProgressBoard* ProgressBoard::current() { return g_board.load(std::memory_order_acquire); }

std::vector<RankPlace> ProgressBoard::read() const {
  std::vector<RankPlace> out;
  const int64_t now = monotonic_ns();
  for (int r = 0; r < ranks_; ++r) {
    const ProgressSlot& s = slots_[r];
    RankPlace p;
    p.rank = r;
    p.used = s.used.load() != 0;
    p.step = s.step.load();
    p.phase = Phase(s.phase.load());
    p.a = s.a.load();
    p.b = s.b.load();
    p.pid = s.pid.load();
    p.seconds = double(now - s.since_ns.load()) / 1e9;
    out.push_back(p);
  }
  return out;
}

void mark_phase(int rank, Phase phase, int a, int b) {
  ProgressBoard* board = ProgressBoard::current();
  if (!board || rank < 0 || rank >= board->ranks()) return;
  ProgressSlot& s = board->slot(rank);
  s.a.store(a, std::memory_order_relaxed);
  s.b.store(b, std::memory_order_relaxed);
  s.phase.store(int32_t(phase), std::memory_order_relaxed);
  s.since_ns.store(monotonic_ns(), std::memory_order_release);
}

void mark_step(int rank, int64_t step) {
  ProgressBoard* board = ProgressBoard::current();
  if (!board || rank < 0 || rank >= board->ranks()) return;
  board->slot(rank).step.store(step, std::memory_order_relaxed);
}

std::string phase_text(Phase p, int a, int b) {
  switch (p) {
    case Phase::Idle: return "between steps";
    case Phase::Input: return "waiting for the next batch from the data loader";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::AllReduce: return fmt::format("all-reduce of gradient bucket {} of {}", a, b);
    case Phase::Optimizer: return "optimizer update";
    case Phase::StepEnd: return "end-of-step exchange with the other ranks";
    case Phase::Validation: return fmt::format("validation batch {}", a);
    case Phase::Checkpoint: return "writing a checkpoint";
    case Phase::Agreement: return "agreeing with the other ranks on how the step runs";
  }
  return "unknown";
}

}  // namespace trainer
