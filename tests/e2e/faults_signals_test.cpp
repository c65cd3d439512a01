// Fault injection, signals: INT, TERM, HUP, USR1 at random points of a run, during validation and
// during a checkpoint write, PIPE on stdout, STOP/CONT, and a stop before training. Each must end
// with one clear line, exit 130 within a bound, and a newest checkpoint that loads and equals the
// checkpoint an uninterrupted run wrote at the same step.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "faults.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// Sends `sig` once `ready` (a shell condition) holds and `delay_ms` more have passed.
faults::Stopped signal_when(const std::string& dir, const std::string& run, const std::string& args, const std::string& ready,
                            const std::string& sig, int delay_ms = 0, const std::string& env = "") {
  return faults::run_and(dir, run, args, env,
                         "for i in $(seq 1200); do " + ready + " && break; sleep 0.05; done; sleep " +
                             faults::seconds(delay_ms) + "; kill -" + sig + " $pid");
}

}  // namespace

TEST_CASE("e2e faults: INT, TERM, HUP and USR1 at a random point stop with a checkpoint equal to the uninterrupted run's") {
  const faults::Reference& ref = faults::reference();
  std::random_device rd;
  for (const std::string sig : {"INT", "TERM", "HUP", "USR1"}) {
    // Somewhere in epochs 2-10: a step, a validation or a checkpoint write. Where a slow moment let
    // the run end first, again with a quarter of the delay, then with none.
    const int first_delay = int(rd() % 600);
    faults::Stopped s;
    std::string dir;
    for (int delay : {first_delay, first_delay / 4, 0}) {
      INFO("signal SIG" << sig << " " << delay << " ms after the first epoch's row");
      dir = faults::setup("sig_" + sig + "_" + std::to_string(delay));
      s = signal_when(dir, "cut", "", "[ \"$(wc -l 2>/dev/null <cut/metrics.csv)\" -ge 2 ] 2>/dev/null", sig, delay);
      if (s.code != 0) break;
      WARN("SIG" << sig << " arrived after the run ended (" << delay << " ms): again, sooner");
    }
    INFO(s.out << s.err);
    if (s.code == 0) FAIL("SIG" << sig << " arrived after the run ended every time: nothing was interrupted");
    CHECK(s.code == 130);
    CHECK(s.ms < 2000);
    CHECK_THAT(s.out, Contains("Interrupted (SIG" + sig + ")"));
    faults::check_newest_equals_reference(dir + "/cut", ref);
  }
}

TEST_CASE("e2e faults: a signal during validation stops it at once, and its checkpoint resumes to the uninterrupted run's end") {
  const faults::Reference& ref = faults::reference();
  std::string dir = faults::setup("sig_val");
  faults::Stopped s = signal_when(dir, "cut", "", "grep -q 'test hook: validating' cut.err", "TERM", 100,
                                  "TRAINER_TEST_SLOW_VALIDATION=300");
  INFO(s.out << s.err);
  REQUIRE(s.code == 130);
  CHECK(s.ms < 2000);  // not the 30 s the slowed validation would take
  CHECK_THAT(s.out, Contains("Interrupted (SIGTERM) during the validation of epoch 1: checkpoint cut/checkpoints/epoch-0001-step-000010"));
  faults::check_newest_equals_reference(dir + "/cut", ref);
  // The resume validates epoch 1 again and ends where the uninterrupted run ended.
  e2e::Result r = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("epoch 1, step 10/10"));
  CHECK(faults::same_file(ref.dir + "/checkpoints/epoch-" + faults::kLastEpoch + ".safetensors",
                          dir + "/resumed/checkpoints/epoch-" + faults::kLastEpoch + ".safetensors"));
  CHECK(e2e::read_file(ref.dir + "/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
}

TEST_CASE("e2e faults: a signal during a checkpoint write lets the write finish, then stops with the next checkpoint") {
  const faults::Reference& ref = faults::reference();
  std::string dir = faults::setup("sig_write");
  // The hook holds epoch-0002's weights half-written for 1 s; SIGHUP arrives then.
  faults::Stopped s = signal_when(dir, "cut", "", "grep -q 'stalling write' cut.err", "HUP", 0,
                                  "TRAINER_TEST_STALL_WRITE=epoch-0002.safetensors TRAINER_TEST_STALL_SECONDS=1");
  INFO(s.out << s.err);
  REQUIRE(s.code == 130);
  CHECK(s.ms < 3000);
  CHECK_THAT(s.out, Contains("Interrupted (SIGHUP) at epoch 3 step 1/10"));
  CHECK(fs::exists(dir + "/cut/checkpoints/epoch-0002.safetensors"));
  faults::check_newest_equals_reference(dir + "/cut", ref);
}

TEST_CASE("e2e faults: a closed stdout pipe (| head) stops the run with a checkpoint and one stderr line") {
  const faults::Reference& ref = faults::reference();
  std::string dir = faults::setup("sig_pipe");
  std::string cmd = "cd '" + dir + "' && ( ('" TRAINER_BINARY "' run c.yaml --run-dir cut 2>cut.err; echo $? >cut.rc) | head -1 >head.out )";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string err = e2e::read_file(dir + "/cut.err");
  INFO(err);
  CHECK(e2e::read_file(dir + "/cut.rc").rfind("130", 0) == 0);
  CHECK(e2e::read_file(dir + "/head.out") == "Run directory: cut\n");
  CHECK_THAT(err, Contains("trainer: stopped by SIGPIPE (the console's reader went away): checkpoint cut/checkpoints/"));
  CHECK(faults::lines(err) == 1);
  faults::check_newest_equals_reference(dir + "/cut", ref);
}

TEST_CASE("e2e faults: SIGSTOP then SIGCONT loses nothing: the run ends identical to the uninterrupted one") {
  const faults::Reference& ref = faults::reference();
  std::string dir = faults::setup("sig_stop");
  faults::Stopped s = faults::run_and(dir, "cut", "", "",
                                      "for i in $(seq 1200); do [ -s cut/metrics.csv ] && break; sleep 0.05; done; "
                                      "kill -STOP $pid; sleep 1; kill -CONT $pid");
  INFO(s.out << s.err);
  REQUIRE(s.code == 0);
  CHECK(faults::same_file(ref.dir + "/checkpoints/epoch-" + faults::kLastEpoch + ".safetensors",
                          dir + "/cut/checkpoints/epoch-" + faults::kLastEpoch + ".safetensors"));
}

TEST_CASE("e2e faults: a stop signal before training starts ends at once with one line (nothing to checkpoint)") {
  std::string dir = faults::setup("sig_early");
  // A data set that takes seconds to generate holds the run before its first step.
  faults::Stopped s = faults::run_and(dir, "cut", "--set data.train.size=400000 --set data.train.image_size=32", "",
                                      "sleep 0.3; kill -INT $pid");
  INFO(s.out << s.err);
  CHECK(s.code == 130);
  CHECK(s.ms < 1000);
  CHECK(s.err == "trainer: stopped by a signal before training started: nothing to checkpoint\n");
  CHECK_FALSE(fs::exists(dir + "/cut/checkpoints/epoch-0001.json"));
}
