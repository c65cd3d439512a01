// The stage threads' loop and failure propagation.
#include "core/runtime/device_parallel/stage_threads.h"

#include <string>

namespace trainer {

StageThreads::StageThreads(int stages, std::function<void(int)> bind, Mailbox& box) : bind_(std::move(bind)), box_(box) {
  want_.assign(size_t(stages), false);
  for (int s = 0; s < stages; ++s) threads_.emplace_back([this, s] { loop(s); });
}

StageThreads::~StageThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StageThreads::loop(int s) {
  bool bound = false;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || want_[size_t(s)]; });
    if (stop_) return;
    want_[size_t(s)] = false;
    lock.unlock();
    try {
      if (!bound) {
        bind_(s);
        bound = true;
      }
      job_(s);
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      bool aborted = false;
      std::string what = "unknown error";
      try {
        throw;
      } catch (const PipelineAborted&) {
        aborted = true;
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      if (!aborted) box_.abort("stage " + std::to_string(s) + " failed: " + what);
      std::lock_guard<std::mutex> g(mu_);
      if (!first_ || (first_is_abort_ && !aborted)) {
        first_ = e;
        first_is_abort_ = aborted;
      }
    }
    lock.lock();
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void StageThreads::run_all(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = fn;
  first_ = nullptr;
  pending_ = int(threads_.size());
  for (size_t s = 0; s < want_.size(); ++s) want_[s] = true;
  cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  std::exception_ptr e = first_;
  first_ = nullptr;
  lock.unlock();
  if (e) {
    box_.clear_abort();
    std::rethrow_exception(e);
  }
}

void StageThreads::run_on(int s, const std::function<void()>& fn) {
  run_all([&](int t) {
    if (t == s) fn();
  });
}

}  // namespace trainer
