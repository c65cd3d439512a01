// StageThreads: one long-lived thread per pipeline stage (per device), each bound to its
// device once; runs a function on all of them and waits, so a failure in one stage stops the
// others (through the mailbox) and is rethrown to the caller.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/runtime/device_parallel/mailbox.h"

namespace trainer {

class StageThreads {
 public:
  // bind(s) runs first on stage s's thread (binding its device context).
  StageThreads(int stages, std::function<void(int)> bind, Mailbox& box);
  ~StageThreads();
  StageThreads(const StageThreads&) = delete;
  StageThreads& operator=(const StageThreads&) = delete;

  // fn(s) on every stage's thread at once; returns when all are done. The first exception (not
  // counting the PipelineAborted it causes elsewhere) is rethrown; the mailbox is then cleared.
  void run_all(const std::function<void(int)>& fn);
  // fn on stage s's thread only.
  void run_on(int s, const std::function<void()>& fn);
  int size() const { return int(threads_.size()); }

 private:
  void loop(int s);
  std::function<void(int)> bind_;
  Mailbox& box_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void(int)> job_;
  std::vector<bool> want_;  // per stage: run job_ now
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr first_;
  bool first_is_abort_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace trainer
