// The loop's test hooks: parsed from TRAINER_INJECT_FAULT, TRAINER_TEST_SIGINT_AT_STEP,
// TRAINER_TEST_HOLD, TRAINER_INJECT_NONFINITE and TRAINER_TEST_STATS_LAG, applied before a step.
#include "core/run/test_hooks.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "core/runtime/progress.h"

namespace trainer {
namespace {

// "<rank>:<step>" into rank and step (left as they are when absent or malformed).
void rank_step(const char* name, int& rank, int64_t& step) {
  const char* s = std::getenv(name);
  int r = -1;
  long long t = -1;
  if (s && std::sscanf(s, "%d:%lld", &r, &t) == 2) rank = r, step = t;
}

}  // namespace

LoopTestHooks LoopTestHooks::from_env() {
  LoopTestHooks h;
  rank_step("TRAINER_INJECT_FAULT", h.fault_rank, h.fault_step);
  rank_step("TRAINER_TEST_HOLD", h.hold_rank, h.hold_step);
  if (const char* s = std::getenv("TRAINER_TEST_SIGINT_AT_STEP")) h.sigint_step = std::strtoll(s, nullptr, 10);
  if (const char* s = std::getenv("TRAINER_TEST_STATS_LAG")) h.stats_lag = std::atoi(s);
  for (const char* s = std::getenv("TRAINER_INJECT_NONFINITE"); s && *s;) {
    char* end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    if (end == s) break;
    h.nonfinite.insert(v);
    s = *end == ',' ? end + 1 : end;
  }
  return h;
}

void LoopTestHooks::before_step(int rank, int64_t step, Trainee& t) const {
  if (rank == hold_rank && step == hold_step) {
    mark_phase(rank, Phase::Forward);
    std::fprintf(stderr, "test hook: holding rank %d at step %lld\n", rank, (long long)step);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (rank == fault_rank && step == fault_step) throw std::runtime_error(fmt::format("injected fault at step {}", step));
  if (rank == 0 && step == sigint_step) std::raise(SIGINT);
  if (nonfinite.count(step)) t.inject_nonfinite();
}

}  // namespace trainer
