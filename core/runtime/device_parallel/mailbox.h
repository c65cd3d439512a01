// Mailbox: the flags by which pipeline stages hand each other activations and gradients (one
// slot per boundary, micro-batch and direction), with waiting timed and abortable.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer {

// Thrown in a stage that was waiting when another stage failed.
class PipelineAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Mailbox {
 public:
  // Clears every slot for a new step of `slots` slots (between steps: no stage is waiting).
  void reset(size_t slots) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.assign(slots, false);
  }
  void post(size_t slot) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.at(slot) = true;
    }
    cv_.notify_all();
  }
  // Blocks until `slot` is posted; returns the seconds waited. Throws PipelineAborted after abort().
  double wait(size_t slot) {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return aborted_ || ready_.at(slot); });
    if (aborted_) throw PipelineAborted("stopped: " + why_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Wakes every waiter with an error (a stage failed); stays aborted until clear_abort().
  void abort(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_) why_ = why;
      aborted_ = true;
    }
    cv_.notify_all();
  }
  void clear_abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = false;
    why_.clear();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> ready_;
  bool aborted_ = false;
  std::string why_;
};

}  // namespace trainer
