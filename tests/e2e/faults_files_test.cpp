// Fault injection, the files around a run: a full disk (a small tmpfs), a checkpoint folder that
// turns read-only, eval and --resume racing a live run that prunes, and --resume choosing by
// training position (not file times), naming the invalid checkpoints it passes over.
#include <catch2/catch.hpp>

#include <filesystem>

#include "faults.h"
#include "skip.h"

namespace fs = std::filesystem;
using Catch::Contains;
using Catch::StartsWith;

namespace {

// Mounts (as root) a tmpfs of `size` at `dir`; false when this machine does not allow it.
bool mount_tmpfs(const std::string& dir, const std::string& size) {
  fs::create_directories(dir);
  return std::system(("mount -t tmpfs -o size=" + size + " tmpfs '" + dir + "' 2>/dev/null").c_str()) == 0;
}

struct Unmount {
  std::string dir;
  ~Unmount() { (void)std::system(("umount -l '" + dir + "' 2>/dev/null").c_str()); }
};

}  // namespace

TEST_CASE("e2e faults: a full disk ends with one line and exit 3, and the newest checkpoint equals the uninterrupted run's") {
  std::string dir = faults::setup("full_disk");
  if (!mount_tmpfs(dir + "/disk", "64k"))
    TRAINER_SKIP(Permission, "this machine does not allow mounting a tmpfs (not root, or in a container without CAP_SYS_ADMIN)");
  Unmount um{dir + "/disk"};
  const faults::Reference& ref = faults::reference();
  faults::Stopped s = faults::run_and(dir, "disk/r", "--set checkpoint.every_steps=1 --set checkpoint.keep=2", "", "true");
  INFO(s.out << s.err);
  CHECK(s.code == 3);
  CHECK(faults::lines(s.err) == 1);
  CHECK_THAT(s.err, StartsWith("file error: cannot write disk/r/checkpoints/epoch-"));
  CHECK_THAT(s.err, Contains(": No space left on device"));
  faults::check_newest_equals_reference(dir + "/disk/r", ref);
}

TEST_CASE("e2e faults: a checkpoint folder that turns read-only ends with one line and exit 3, and the previous checkpoint stays") {
  std::string dir = faults::setup("read_only");
  const faults::Reference& ref = faults::reference();
  // After the first epoch's checkpoint the folder is bound onto itself read-only (as root; as
  // another user a chmod would do, but root writes through permissions).
  faults::Stopped s = faults::run_and(
      dir, "r", "", "",
      "for i in $(seq 1200); do [ -f r/checkpoints/epoch-0001.json ] && break; sleep 0.02; done; "
      "mount --bind r/checkpoints r/checkpoints 2>/dev/null && mount -o remount,bind,ro r/checkpoints 2>/dev/null && touch ro.ok");
  Unmount um{dir + "/r/checkpoints"};
  if (!fs::exists(dir + "/ro.ok"))
    TRAINER_SKIP(Permission, "this machine does not allow a read-only bind mount (not root, or in a container)");
  INFO(s.out << s.err);
  CHECK(s.code == 3);
  CHECK(faults::lines(s.err) == 1);
  CHECK_THAT(s.err, StartsWith("file error: cannot create r/checkpoints/epoch-"));
  CHECK_THAT(s.err, Contains(": Read-only file system"));
  faults::check_newest_equals_reference(dir + "/r", ref);
}

TEST_CASE("e2e faults: eval and --resume of a live run that prunes every step read a whole checkpoint") {
  std::string dir = faults::setup("live");
  // keep: 1 and a checkpoint every step: whatever a reader chooses is pruned some ms later.
  faults::Stopped s = faults::run_and(
      dir, "live", "--set checkpoint.every_steps=1 --set checkpoint.keep=1", "",
      "for i in $(seq 1200); do [ -s live/metrics.csv ] && break; sleep 0.02; done; "
      "for i in 1 2 3 4 5 6; do '" TRAINER_BINARY "' eval live >eval$i.out 2>&1; echo $? >eval$i.rc; done; "
      "'" TRAINER_BINARY "' run --resume live --run-dir resumed >resumed.out 2>&1; echo $? >resumed.rc");
  INFO(s.out << s.err);
  CHECK(s.code == 0);
  for (int i = 1; i <= 6; ++i) {
    std::string n = std::to_string(i);
    INFO("eval " << n << ": " << e2e::read_file(dir + "/eval" + n + ".out"));
    CHECK(e2e::read_file(dir + "/eval" + n + ".rc") == "0\n");
    CHECK_THAT(e2e::read_file(dir + "/eval" + n + ".out"), Contains("accuracy"));
  }
  INFO("resume: " << e2e::read_file(dir + "/resumed.out"));
  CHECK(e2e::read_file(dir + "/resumed.rc") == "0\n");
  CHECK_THAT(e2e::read_file(dir + "/resumed.out"), Contains("Resuming from live/checkpoints/epoch-"));
}

TEST_CASE("e2e faults: --resume chooses by training position, not file time, and names what it passes over") {
  std::string dir = faults::setup("position");
  const std::string three = "--set train.epochs=3 --runs-root runs --set checkpoint.keep=3";
  e2e::Result first = e2e::trainer("run c.yaml " + three, dir);
  REQUIRE(first.code == 0);
  // A later run of the same config, stopped at step 3, and an old checkpoint touched: both newer files.
  e2e::Result second = e2e::trainer("run c.yaml " + three, dir, "TRAINER_TEST_SIGINT_AT_STEP=3");
  REQUIRE(second.code == 130);
  std::string run1;
  for (const auto& d : fs::directory_iterator(dir + "/runs/faults"))
    if (fs::exists(d.path() / "checkpoints/epoch-0003.json")) run1 = d.path().string();
  REQUIRE(!run1.empty());
  REQUIRE(std::system(("touch -d '+1 hour' '" + run1 + "/checkpoints/epoch-0001.json' '" + run1 +
                       "/checkpoints/epoch-0001.safetensors'").c_str()) == 0);
  e2e::Result r = e2e::trainer("run c.yaml --resume auto --run-dir a " + three, dir);
  INFO(r.out << r.err);
  CHECK_THAT(r.out, Contains("/checkpoints/epoch-0003.safetensors: epoch 4, step 0/10"));
  // The furthest checkpoint corrupt: the next one back, and a warning naming it.
  std::string w3 = run1.substr(dir.size() + 1) + "/checkpoints/epoch-0003.safetensors";  // as the message names it
  std::string bytes = e2e::read_file(dir + "/" + w3);
  bytes[bytes.size() - 1] ^= 0x55;
  e2e::write_file(dir + "/" + w3, bytes);
  r = e2e::trainer("run c.yaml --resume auto --run-dir b " + three, dir);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("/checkpoints/epoch-0002.safetensors: epoch 3, step 0/10"));
  CHECK_THAT(r.err, StartsWith("warning: passed over an invalid checkpoint: " + w3 + ": CRC-32 "));
  CHECK(faults::lines(r.err) == 1);
  // The same for a run directory given by name.
  r = e2e::trainer("eval '" + run1 + "'", dir);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("epoch-0002.safetensors"));
  CHECK_THAT(r.err, StartsWith("warning: passed over an invalid checkpoint: "));
}

TEST_CASE("e2e faults: a checkpoint that does not read back after writing is removed, with one line and exit 3") {
  std::string dir = faults::setup("read_back");
  const faults::Reference& ref = faults::reference();
  // The hook flips the last byte of epoch-0002's weights on disk, as a lying disk would.
  faults::Stopped s = faults::run_and(dir, "r", "", "TRAINER_TEST_CORRUPT_WRITE=epoch-0002.safetensors", "true");
  INFO(s.out << s.err);
  CHECK(s.code == 3);
  CHECK_THAT(s.err, StartsWith("file error: r/checkpoints/epoch-0002.safetensors: the checkpoint just written does not "
                                "read back (r/checkpoints/epoch-0002.safetensors: CRC-32 "));
  CHECK(faults::lines(s.err) == 1);
  CHECK_THAT(s.err, Contains("the previous checkpoint stays the newest"));
  CHECK_FALSE(fs::exists(dir + "/r/checkpoints/epoch-0002.json"));
  CHECK_FALSE(fs::exists(dir + "/r/checkpoints/epoch-0002.safetensors"));
  faults::check_newest_equals_reference(dir + "/r", ref);
}
