// The fault-injection suite's shared parts: the run every case interrupts, its uninterrupted
// reference (a checkpoint at every step), running a command while a script acts on it, and the
// property every case checks: the newest checkpoint loads and equals the reference's at its step.
#pragma once
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "cli.h"
#include "small_cnn.h"

namespace faults {

// Small and BN-free: a step takes milliseconds, 30 epochs of 10 steps a few seconds.
inline const std::string kConfig = [] {
  e2e::SmallCnn c;
  c.name = "faults";
  c.seed = 5;
  c.conv2 = c.val = c.flip = true;
  c.train = "{epochs: 30, batch_size: 32}";
  c.optimizer = "{type: adam, lr: 0.003}";
  c.schedule = "{type: cosine}";
  c.extra = "devices: {cpu: 1, threads: 1}\n";
  return c.yaml();
}();
inline const std::string kLastEpoch = "0030";

inline std::string fmt_hex(size_t h) {
  char b[64];  // 25 + 16 characters and the NUL
  std::snprintf(b, sizeof b, "trainer-faults-reference-%016zx", h);
  return b;
}

inline std::string setup(const std::string& tag) {
  std::string dir = e2e::temp_dir("faults_" + tag);
  e2e::write_file(dir + "/c.yaml", kConfig);
  return dir;
}

inline bool same_file(const std::string& a, const std::string& b) {
  std::string x = e2e::read_file(a), y = e2e::read_file(b);
  return !x.empty() && x == y;
}

inline size_t lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

inline std::string seconds(int ms) { return std::to_string(ms / 1000) + "." + std::to_string(1000 + ms % 1000).substr(1); }

// The uninterrupted run, with a checkpoint after every step (and every epoch): made once per
// trainer binary and shared by every test process (each test case runs in a process of its own:
// the eleven cases made it eleven times, a third of their time, 2.5 minutes of CI's under ASan).
// It lives in the temp folder under a name keyed by the binary (path, size, mtime) and the config;
// the first process to get the lock makes it in a folder of its own and renames it into place, so
// a process never sees half of one. The runs are deterministic: every maker makes the same bytes.
struct Reference {
  std::string dir;  // its run directory
};
// The references of earlier builds of this binary (the same path, another size or time: each
// rebuild made one more, ~7 MB, and nothing removed them) beside `current`, with their locks.
inline void remove_stale_references(const std::filesystem::path& current) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(current.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (e.path() == current || name.rfind("trainer-faults-reference-", 0) != 0 || !e.is_directory(ec)) continue;
    const std::string id = e2e::read_file((e.path() / "id").string());
    if (id.rfind(std::string(TRAINER_BINARY) + "|", 0) != 0) continue;  // another binary's (or an older, unnamed one)
    fs::remove_all(e.path(), ec);
    fs::remove(e.path().string() + ".lock", ec);
  }
}
inline const Reference& reference() {
  static const Reference ref = [] {
    namespace fs = std::filesystem;
    const fs::path bin(TRAINER_BINARY);
    const std::string id = std::string(TRAINER_BINARY) + "|" + std::to_string(fs::file_size(bin)) + "|" +
                           std::to_string(fs::last_write_time(bin).time_since_epoch().count()) + "|" + kConfig;
    const fs::path home = fs::temp_directory_path() / fmt_hex(std::hash<std::string>{}(id));
    const std::string lock = home.string() + ".lock";
    const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) FAIL("cannot lock " << lock);
    if (!fs::exists(home / "ref" / "done")) {
      std::string dir = setup("reference");
      e2e::Result r = e2e::trainer("run c.yaml --run-dir ref --set checkpoint.every_steps=1 --set checkpoint.keep=100000", dir);
      if (r.code != 0) {
        ::close(fd);
        FAIL("the reference run failed: " << r.out << r.err);
      }
      e2e::write_file(dir + "/ref/done", "");
      e2e::write_file(dir + "/id", id);
      std::error_code ec;
      fs::remove_all(home, ec);
      fs::rename(dir, home);
      remove_stale_references(home);
    }
    ::close(fd);  // (releases the lock)
    return Reference{(home / "ref").string()};
  }();
  return ref;
}

struct Stopped : e2e::Result {
  long ms = -1;  // from the script's end (the signal) to the process' exit
};

// Starts `trainer run c.yaml --run-dir <run> <args>` in `dir` in the background (stdout in
// <run>.out, stderr in <run>.err with '/' as '_', $pid its process), runs `script`, then waits for it.
inline Stopped run_and(const std::string& dir, const std::string& run, const std::string& args, const std::string& env,
                       const std::string& script) {
  std::string log = run;  // the logs beside `dir`'s config, also when the run is inside a mount
  std::replace(log.begin(), log.end(), '/', '_');
  std::string cmd = "cd '" + dir + "' && (" + env + " '" TRAINER_BINARY "' run c.yaml --run-dir " + run + " " + args + " >" +
                    log + ".out 2>" + log + ".err & pid=$!; " + script +
                    "; start=$(date +%s%N); wait $pid; echo $? >" + log + ".rc; echo $(( ($(date +%s%N) - start) / 1000000 )) >" +
                    log + ".ms)";
  Stopped s;
  if (std::system(cmd.c_str()) != 0) FAIL("the shell failed: " << cmd);
  s.code = std::atoi(e2e::read_file(dir + "/" + log + ".rc").c_str());
  s.ms = std::atol(e2e::read_file(dir + "/" + log + ".ms").c_str());
  s.out = e2e::read_file(dir + "/" + log + ".out");
  s.err = e2e::read_file(dir + "/" + log + ".err");
  return s;
}

inline int64_t global_step_of(const std::string& sidecar) {
  return nlohmann::json::parse(e2e::read_file(sidecar)).at("global_step").get<int64_t>();
}

// The property: the newest checkpoint of `run_dir` (as `trainer eval` chooses it) loads, and its
// weights and optimizer state are the bytes the reference wrote at the same global step.
inline void check_newest_equals_reference(const std::string& run_dir, const Reference& ref) {
  e2e::Result ev = e2e::trainer("eval '" + run_dir + "' --json");
  INFO("trainer eval: " << ev.out << ev.err);
  REQUIRE(ev.code == 0);
  std::string weights = nlohmann::json::parse(ev.out).at("checkpoint").get<std::string>();
  std::string sidecar = std::filesystem::path(weights).replace_extension(".json").string();
  int64_t step = global_step_of(sidecar);
  INFO("newest checkpoint " << weights << " at global step " << step);
  bool found = false;
  for (const auto& f : std::filesystem::directory_iterator(ref.dir + "/checkpoints")) {
    if (f.path().extension() != ".json" || global_step_of(f.path().string()) != step) continue;
    found = true;
    CHECK(same_file(weights, std::filesystem::path(f.path()).replace_extension(".safetensors").string()));
  }
  CHECK(found);
}

}  // namespace faults
