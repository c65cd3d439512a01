// Cooperative interruption: the CLI's signal handler asks, the step loop stops at a step boundary.
#pragma once
#include <atomic>
#include <csignal>
#include <string>

namespace trainer {

inline std::atomic<int>& interrupt_requests() {
  static std::atomic<int> n{0};
  return n;
}
// The signal that asked first (0: none, or a request made without one).
inline std::atomic<int>& interrupt_signal() {
  static std::atomic<int> s{0};
  return s;
}
// Set once the step loop runs: before that a stop signal has nothing to checkpoint and ends the
// process at once (reading a large dataset must not hold Ctrl-C back).
inline std::atomic<bool>& interrupt_checkpoints() {
  static std::atomic<bool> armed{false};
  return armed;
}
// Set while rank 0 writes a checkpoint: a second stop signal then says the write is finishing.
inline std::atomic<bool>& interrupt_saving() {
  static std::atomic<bool> saving{false};
  return saving;
}
inline bool interrupted() { return interrupt_requests().load(std::memory_order_relaxed) > 0; }

// "SIGINT", "SIGHUP", ... for the console line that says why a run stopped.
inline std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGPIPE: return "SIGPIPE";
    default: return sig ? "signal " + std::to_string(sig) : "a request";
  }
}

}  // namespace trainer
