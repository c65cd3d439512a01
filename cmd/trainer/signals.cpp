// Stop signals for `trainer run`: the handlers (async-signal-safe: atomics, poll, open, dup2, _Exit).
#include "cmd/trainer/signals.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>

#include "cmd/trainer/command.h"
#include "core/runtime/interrupt.h"

namespace trainer::cli {
namespace {

void ask(int sig) {
  int none = 0;
  interrupt_signal().compare_exchange_strong(none, sig);
  interrupt_requests().fetch_add(1);
}

void say(const char* text) {
  size_t n = 0;
  while (text[n]) ++n;
  ssize_t ignored = ::write(STDERR_FILENO, text, n);
  (void)ignored;
}

// Stop signals after the first (a PIPE first does not count: the user has not asked yet).
std::atomic<int> g_more{0};

extern "C" void on_stop(int sig) {
  if (!interrupt_checkpoints().load()) {
    say("trainer: stopped by a signal before training started: nothing to checkpoint\n");
    std::_Exit(kInterrupted);
  }
  if (interrupt_requests().load() == 0 || interrupt_signal().load() == SIGPIPE) {
    ask(sig);
    return;
  }
  // Ctrl-C pressed twice in quick succession: the checkpoint the first one asked for is finished
  // (a step and a write: bounded); a third signal leaves without it.
  if (g_more.fetch_add(1) == 0) {
    say(interrupt_saving().load() ? "trainer: finishing the checkpoint being written; interrupt again to leave without it\n"
                                  : "trainer: stopping after this step to write a checkpoint; interrupt again to leave "
                                    "without it\n");
    return;
  }
  say("trainer: left without finishing the checkpoint; the previous one stays valid\n");
  std::_Exit(kInterrupted);
}

// A write to a pipe nobody reads: whichever of stdout and stderr it was (poll says POLLERR) now
// writes to /dev/null, and the run stops as for any other signal. A second PIPE never forces an exit.
extern "C" void on_pipe(int sig) {
  const int saved = errno;
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP))) {
      int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, fd);
        ::close(null);
      }
    }
  }
  if (interrupt_requests().load() == 0) ask(sig);
  errno = saved;
}

void handle(int sig, void (*fn)(int)) {
  struct sigaction sa {};
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}

}  // namespace

void install_stop_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) handle(sig, on_stop);
  handle(SIGPIPE, on_pipe);
}

}  // namespace trainer::cli
