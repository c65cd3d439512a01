// The restart supervisor: a child trainer per attempt (its own process group, the stop signals
// forwarded to it), the exit classified, the next attempt resumed from the newest checkpoint.
#include "cmd/trainer/restarts.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/checkpoint/resume.h"
#include "core/io/file.h"

namespace trainer::cli {
namespace {

volatile sig_atomic_t g_child = 0;

// Ctrl-C reaches the supervisor only (the child has a process group of its own): it is passed on
// once, so the child stops at its next step with a checkpoint (a second one would make it leave
// at once).
void forward(int sig) {
  if (g_child > 0) ::kill(pid_t(g_child), sig);
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Starts `trainer run args...` and waits for it; returns its wait status.
int attempt(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  static char self[] = "/proc/self/exe";
  argv.push_back(self);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw FileError(fmt::format("--max-restarts: fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) ::signal(s, SIG_DFL);
    ::execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "--max-restarts: cannot start the run: %s\n", std::strerror(errno));
    std::_Exit(1);
  }
  g_child = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  return status;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

// The newest valid checkpoint among `dirs` (newest attempt first), or "" when none has one.
std::string newest_checkpoint(const std::vector<std::string>& dirs) {
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    try {
      return find_checkpoint(*it).weights;
    } catch (const std::exception&) {  // killed before its first checkpoint: the one before
    }
  }
  return "";
}

}  // namespace

bool retryable(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 4 || WEXITSTATUS(status) == 5;
  if (!WIFSIGNALED(status)) return false;
  const int s = WTERMSIG(status);
  return s != SIGINT && s != SIGTERM && s != SIGHUP && s != SIGUSR1 && s != SIGPIPE;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

int run_with_restarts(const RestartPlan& plan) {
  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaction(s, &sa, nullptr);
  std::vector<std::string> dirs;  // every attempt's run directory
  std::string resume = plan.resume;
  for (int n = 0;; ++n) {
    const std::string dir = n == 0 ? plan.run_dir : fmt::format("{}-restart-{}", plan.run_dir, n);
    dirs.push_back(dir);
    std::vector<std::string> args = plan.args;
    args.insert(args.end(), {"--run-dir", dir});
    if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
    const int status = attempt(args);
    if (!retryable(status)) return exit_code(status);
    const std::string from = newest_checkpoint(dirs);
    std::string line;
    if (n >= plan.max_restarts) {
      line = fmt::format("{} the run in {} {}: not restarted, {} restart{} of {} used", now_utc(), dir,
                         describe_status(status), n, n == 1 ? "" : "s", plan.max_restarts);
    } else {
      if (!from.empty()) resume = from;  // else the previous source again (or from scratch)
      line = fmt::format("{} restart {} of {}: the run in {} {}; {} into {}-restart-{}", now_utc(), n + 1, plan.max_restarts,
                         dir, describe_status(status),
                         resume.empty() ? "starting again from scratch (no checkpoint yet)" : "resuming from " + resume,
                         plan.run_dir, n + 1);
    }
    std::fprintf(stderr, "trainer: %s\n", line.c_str());
    std::fflush(stderr);
    if (std::FILE* f = std::fopen((plan.run_dir + "/restarts.log").c_str(), "a")) {
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
    if (n >= plan.max_restarts) return exit_code(status);
  }
}

}  // namespace trainer::cli
