// Cooperative interruption: the CLI's signal handler asks, the step loop stops at a step boundary.
#pragma once
#include <atomic>

namespace trainer {

inline std::atomic<int>& interrupt_requests() {
  static std::atomic<int> n{0};
  return n;
}
inline bool interrupted() { return interrupt_requests().load(std::memory_order_relaxed) > 0; }

}  // namespace trainer
