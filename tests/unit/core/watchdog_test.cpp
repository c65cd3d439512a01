// The watchdog's early stall warning: the typical step from the board, when it warns, once per stall.
#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/progress.h"
#include "core/runtime/watchdog.h"

using namespace trainer;

TEST_CASE("watchdog: the typical step is the median step of the intervals in which the slowest rank advanced") {
  StepClock c;
  CHECK(c.median_s() == 0);
  c.observe(0.0, 0);
  c.observe(1.0, 0);  // no step done: no sample
  CHECK(c.median_s() == 0);
  c.observe(2.0, 10);  // 10 steps in 2 s since step 0 was first seen
  CHECK(c.median_s() == Approx(0.2));
  c.observe(3.0, 20);
  c.observe(4.0, 30);
  c.observe(5.0, 40);
  c.observe(15.0, 41);  // a validation or a checkpoint: one slow step among fast ones
  CHECK(c.median_s() == Approx(0.1));
  for (int i = 1; i <= 40; ++i) c.observe(15.0 + i, 41 + 2 * i);  // 0.5 s a step: the old samples leave the ring
  CHECK(c.median_s() == Approx(0.5));
  CHECK(c.median_before_last_s() == Approx(0.5));
}

TEST_CASE("watchdog: the warning's step time leaves out the interval that ran into the stall") {
  // A short run (the e2e watchdog test's, 2026-11-29: 2 in 10 runs had no warning): 22 steps in one
  // 0.2 s period, then 2 steps in the next, whose second is the one that stops. Counted by intervals,
  // the stalled one's 0.1 s could decide; counted by steps it is 2 of 24, and it is left out anyway.
  StepClock c;
  c.observe(0.2, 16);
  c.observe(0.4, 38);
  c.observe(0.6, 40);
  for (double t = 0.8; t < 3; t += 0.2) c.observe(t, 40);  // held: no further sample
  CHECK(c.median_s() == Approx(0.2 / 22));
  CHECK(c.median_before_last_s() == Approx(0.2 / 22));
  CHECK(stall_warning_after(c.median_before_last_s(), 2) == Approx(0.5));
  StepClock one;  // a single sample is all there is
  one.observe(0, 0);
  one.observe(1, 4);
  CHECK(one.median_before_last_s() == Approx(0.25));
  // In the ring (31 samples), the newest is the one left out wherever it was written.
  StepClock ring;
  ring.observe(0, 0);
  for (int i = 1; i <= 40; ++i) ring.observe(i, 10 * i);  // 0.1 s a step
  ring.observe(100, 401);                                  // 59 s: the interval into a stall
  CHECK(ring.median_s() == Approx(0.1));
  CHECK(ring.median_before_last_s() == Approx(0.1));
  // 1 s a step from here: 16 new intervals of 31 hold 16 steps against the old ones' 140, the
  // median step is still the old one; when the ring holds only new ones, the new one.
  for (int i = 0; i < 16; ++i) ring.observe(101 + i, 402 + i);
  CHECK(ring.median_s() == Approx(0.1));
  for (int i = 16; i < 31; ++i) ring.observe(101 + i, 402 + i);
  CHECK(ring.median_s() == Approx(1.0));
  CHECK(ring.median_before_last_s() == Approx(1.0));
}

TEST_CASE("watchdog: slow 1-step intervals (the start, a validation, a checkpoint) do not decide a short run's step time") {
  // The e2e watchdog test on CI (2026-12-01): 40 steps in under half a second, looks every 0.2 s.
  // The first step and the epoch's end (validation and checkpoint) each filled a look; by intervals
  // the median of the four before the stall was 0.2 s a step, 20 of which is past the 2 s limit, and
  // no warning came. By steps, 2 of 38 are slow.
  StepClock c;
  c.observe(0.2, 0);   // building the replicas
  c.observe(0.4, 1);   // the first step: 0.2 s
  c.observe(0.6, 16);  // 15 steps
  c.observe(0.8, 17);  // validation and the epoch's checkpoint
  c.observe(1.0, 38);  // 21 steps
  c.observe(1.2, 40);  // into the stall
  for (double t = 1.4; t < 3; t += 0.2) c.observe(t, 40);
  CHECK(c.median_before_last_s() == Approx(0.2 / 21));  // the 21-step interval holds the middle step
  CHECK(stall_warning_after(c.median_before_last_s(), 2) == Approx(0.5));
  // The same looks every 2 s (slow steps): the warning waits for 20 of them.
  StepClock slow;
  slow.observe(0, 0);
  slow.observe(2, 1);
  slow.observe(4, 2);
  slow.observe(6, 3);
  CHECK(slow.median_before_last_s() == Approx(2));
  CHECK(stall_warning_after(slow.median_before_last_s(), 300) == Approx(40));
}

TEST_CASE("watchdog: a warning after 20 median steps, at least 30 s (a quarter of a shorter limit), only before the limit") {
  CHECK(stall_warning_after(0.1, 300) == Approx(30));   // 20 steps is 2 s: the floor
  CHECK(stall_warning_after(5.0, 300) == Approx(100));  // slow steps: 20 of them
  CHECK(stall_warning_after(0.0, 300) == Approx(30));   // no step done yet
  CHECK(stall_warning_after(0.01, 8) == Approx(2));     // a short limit: a quarter of it
  CHECK(stall_warning_after(20.0, 300) == 0);           // 400 s: after the abort, no warning
}

TEST_CASE("watchdog: a rank stuck in one phase is warned about once, naming it, its step and phase, before the abort") {
  ProgressBoard board(2, 0, 2, false);
  std::mutex mu;
  std::vector<std::string> said;
  bool stalled = false;
  {
    // limit 2 s: warnings after max(20 x ~10 ms, 0.5 s) = 0.5 s of no progress.
    Watchdog dog(board, 2.0, 0.0, [&](const StallReport&) { stalled = true; },
                 StallWarnings{[&](const std::string& l) {
                                 std::lock_guard<std::mutex> lock(mu);
                                 said.push_back(l);
                               },
                               0, 2});
    for (int64_t s = 0; s < 60; ++s) {  // both ranks step every 10 ms
      for (int r = 0; r < 2; ++r) {
        mark_step(r, s);
        mark_phase(r, Phase::Forward);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    mark_step(0, 60);
    mark_phase(0, Phase::AllReduce, 1, 3);  // rank 0 waits for rank 1, which stays in its backward
    mark_step(1, 60);
    mark_phase(1, Phase::Backward);
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  }
  std::lock_guard<std::mutex> lock(mu);
  CHECK_FALSE(stalled);
  INFO(said.size());
  REQUIRE(said.size() == 2);  // each rank once, however many times the watchdog looked
  bool rank1 = false;
  for (const std::string& l : said) {
    CHECK_THAT(l, Catch::StartsWith("watchdog: warning: rank "));
    CHECK_THAT(l, Catch::Contains("at step 60 for ") && Catch::Contains("(a step takes ") &&
                      Catch::Contains("the job ends if it makes no progress for train.watchdog_s 2 s"));
    rank1 = rank1 || l.find("rank 1 (process 0, pid ") != std::string::npos;
  }
  CHECK(rank1);
}

TEST_CASE("watchdog: a process other than the first leaves the warnings to process 0 when it shares the board") {
  ProgressBoard board(2, 0, 1, false);
  std::vector<std::string> said;
  {
    Watchdog dog(board, 2.0, 0.0, [](const StallReport&) {}, StallWarnings{[&](const std::string& l) { said.push_back(l); }, 1, 1});
    mark_step(0, 0);  // rank 0 (process 0) is on this board
    mark_phase(0, Phase::Forward);
    mark_step(1, 0);
    mark_phase(1, Phase::Backward);
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
  }
  CHECK(said.empty());
}
