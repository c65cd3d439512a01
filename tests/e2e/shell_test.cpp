// A shell user's day with trainer: the running process's name (ps, top, pgrep, killall), configs from a pipe or standard input, configs in UTF-16.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli.h"

TEST_CASE("e2e shell: a running trainer is named trainer to ps, pgrep -x and killall, not exe") {
  // trainer starts itself again to set OpenMP's environment (openmp_env.cpp): by its own path, so
  // that the kernel names the process after it. A run in the background, its name read from
  // /proc and by pgrep -x once it has started training, then stopped with SIGINT.
  const std::string dir = e2e::temp_dir("shell_name");
  const std::string script = "cd '" + dir + "' && unset OMP_WAIT_POLICY GOMP_SPINCOUNT; '" TRAINER_BINARY "' run '"
                             TRAINER_SOURCE_DIR "/configs/smoke.yaml' --set train.epochs=500 --run-dir r >out.txt 2>&1 & "
                             "pid=$!; for i in $(seq 300); do [ -s r/train.log ] && break; sleep 0.1; done; "
                             "cat /proc/$pid/comm >comm.txt; pgrep -x trainer >pgrep.txt; kill -INT $pid; wait $pid; "
                             "echo $pid >pid.txt";
  REQUIRE(std::system(script.c_str()) == 0);
  const std::string pid = e2e::read_file(dir + "/pid.txt");
  INFO("pid " << pid << ", output: " << e2e::read_file(dir + "/out.txt"));
  CHECK(e2e::read_file(dir + "/comm.txt") == "trainer\n");
  CHECK(("\n" + e2e::read_file(dir + "/pgrep.txt")).find("\n" + pid) != std::string::npos);
}

namespace {

// `script` run by bash (process substitution) in `dir`, its exit status.
int bash(const std::string& dir, const std::string& script) {
  const std::string path = dir + "/script.sh";
  e2e::write_file(path, "cd '" + dir + "' || exit 99\nT='" TRAINER_BINARY "'\nSMOKE='" TRAINER_SOURCE_DIR
                        "/configs/smoke.yaml'\n" + script + "\n");
  const int status = std::system(("bash '" + path + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("e2e shell: a config from a pipe or standard input trains and resumes from its run directory") {
  const std::string dir = e2e::temp_dir("shell_pipe");
  // Process substitution (a pipe named /dev/fd/N), then standard input; each resumed for one more
  // epoch from its run directory's config.yaml, the stream being gone.
  // `train` (a command line reading the config from a stream) trains one epoch into run directory
  // `tag`, then `--resume tag` trains a second one into `tag`2.
  auto train_and_resume = [&](const std::string& tag, const std::string& train) {
    INFO(tag);
    CHECK(bash(dir, train + " --set train.epochs=1 --run-dir " + tag + " >" + tag + ".out 2>&1; echo $? >" + tag + ".rc") == 0);
    CHECK(e2e::read_file(dir + "/" + tag + ".rc") == "0\n");
    CHECK(bash(dir, "\"$T\" run --resume " + tag + " --set train.epochs=2 --run-dir " + tag + "2 >" + tag + "2.out 2>&1; echo $? >" +
                        tag + "2.rc") == 0);
    INFO(e2e::read_file(dir + "/" + tag + ".out") << e2e::read_file(dir + "/" + tag + "2.out"));
    CHECK(e2e::read_file(dir + "/" + tag + "2.rc") == "0\n");
    CHECK(std::filesystem::exists(dir + "/" + tag + "2/checkpoints/epoch-0002.safetensors"));
  };
  train_and_resume("p", "\"$T\" run <(cat \"$SMOKE\")");
  train_and_resume("s", "cat \"$SMOKE\" | \"$T\" run -");
  CHECK_THAT(e2e::read_file(dir + "/s/config.yaml"), Catch::Contains("name: smoke"));
  // A named FIFO whose writer opens it after the trainer does (a generator started in the background).
  CHECK(bash(dir, "mkfifo f.yaml; (sleep 0.5; cat \"$SMOKE\" >f.yaml) & \"$T\" run f.yaml --set train.epochs=1 --run-dir f "
                  ">f.out 2>&1; echo $? >f.rc; wait") == 0);
  INFO(e2e::read_file(dir + "/f.out"));
  CHECK(e2e::read_file(dir + "/f.rc") == "0\n");
  // A config error names standard input as <stdin>, with its line and column.
  const std::string smoke = e2e::read_file(TRAINER_SOURCE_DIR "/configs/smoke.yaml");
  const auto epochs_line = 1 + std::count(smoke.begin(), smoke.begin() + long(smoke.find("epochs:")), '\n');
  CHECK(bash(dir, "sed 's/epochs:/epoks:/' \"$SMOKE\" | \"$T\" run - 2>e.err; echo $? >e.rc") == 0);
  CHECK(e2e::read_file(dir + "/e.rc") == "2\n");
  CHECK_THAT(e2e::read_file(dir + "/e.err"), Catch::StartsWith("<stdin>:" + std::to_string(epochs_line) + ":"));
  // --max-restarts reads the config again for each attempt: a stream is refused in one line.
  CHECK(bash(dir, "\"$T\" run --max-restarts 1 <(cat \"$SMOKE\") 2>r.err; echo $? >r.rc") == 0);
  CHECK(e2e::read_file(dir + "/r.rc") == "2\n");
  CHECK_THAT(e2e::read_file(dir + "/r.err"), Catch::Contains("not standard input or a pipe"));
}

TEST_CASE("e2e shell: a UTF-16 config is named as such with the command that converts it, a UTF-8 byte-order mark is read") {
  const std::string dir = e2e::temp_dir("shell_utf16");
  const std::string smoke = e2e::read_file(TRAINER_SOURCE_DIR "/configs/smoke.yaml");
  std::string le = "\xff\xfe", be = "\xfe\xff", bare;
  for (char c : smoke) le += c, le += '\0', be += '\0', be += c, bare += c, bare += '\0';
  e2e::write_file(dir + "/le.yaml", le);
  e2e::write_file(dir + "/be.yaml", be);
  e2e::write_file(dir + "/bare.yaml", bare);
  e2e::write_file(dir + "/bom.yaml", "\xef\xbb\xbf" + smoke);
  const e2e::Result l = e2e::trainer("summary le.yaml", dir), b = e2e::trainer("summary be.yaml", dir);
  const e2e::Result n = e2e::trainer("summary bare.yaml", dir), m = e2e::trainer("summary bom.yaml", dir);
  CHECK(l.code == 2);
  CHECK(l.err == "le.yaml:1:1: this config is UTF-16LE text; configs are UTF-8: convert it with iconv -f UTF-16 -t UTF-8 "
                 "'le.yaml' > config.yaml\n");
  CHECK(b.code == 2);
  CHECK_THAT(b.err, Catch::StartsWith("be.yaml:1:1: this config is UTF-16BE text;"));
  CHECK(n.code == 2);
  CHECK_THAT(n.err, Catch::Contains("this config is UTF-16LE text; configs are UTF-8: convert it with iconv -f UTF-16LE"));
  INFO(m.out << m.err);
  CHECK(m.code == 0);
  CHECK_THAT(m.out, Catch::Contains("smoke"));
}
