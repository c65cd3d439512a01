// Bucketed gradient all-reduce on a communication thread.
#include "core/engine/grad_buckets.h"

#include <algorithm>

namespace trainer {

GradBuckets::GradBuckets(Tensor grads, const std::vector<int64_t>& cuts, int64_t bucket_floats, Communicator& comm,
                         OpContext& ctx)
    : grads_(grads), comm_(comm), ctx_(ctx) {
  int64_t n = grads.numel();
  std::vector<int64_t> c(cuts.begin(), cuts.end());
  c.push_back(n);
  std::sort(c.begin(), c.end());
  // Walk down from the end: backward finishes the last parameters first.
  int64_t end = n;
  for (size_t i = c.size(); i-- > 0;) {
    int64_t cut = std::clamp<int64_t>(c[i], 0, n);
    if (end - cut >= bucket_floats || (cut == 0 && end > 0)) {
      buckets_.push_back({cut, end});
      end = cut;
    }
  }
  if (end > 0) buckets_.push_back({0, end});
  std::reverse(buckets_.begin(), buckets_.end());
  done_.assign(buckets_.size(), false);
  solo_ = comm.size() == 1;
  if (!solo_) thread_ = std::thread([this] { loop(); });
}

GradBuckets::~GradBuckets() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GradBuckets::start_step() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(done_.begin(), done_.end(), false);
  next_ready_ = buckets_.size();
  reduce_s_ = exposed_s_ = 0;
}

void GradBuckets::on_frontier(int64_t frontier) {
  std::lock_guard<std::mutex> lock(mu_);
  while (next_ready_ > 0 && buckets_[next_ready_ - 1].begin >= frontier) {
    --next_ready_;
    if (solo_)
      done_[next_ready_] = true;
    else
      queue_.push_back(next_ready_);
  }
  if (!solo_) cv_.notify_all();
}

void GradBuckets::wait(size_t i) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_[i] || error_; });
  if (error_) std::rethrow_exception(error_);
  exposed_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradBuckets::loop() {
  try {
    ctx_.bind_thread();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  for (;;) {
    size_t b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
      if (error_) {
        done_[b] = true;  // waiters see error_ first
        cv_.notify_all();
        continue;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    try {
      Tensor part = grads_.slice(buckets_[b].begin, buckets_[b].end);
      comm_.all_reduce_sum(part);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    reduce_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done_[b] = true;
    cv_.notify_all();
  }
}

}  // namespace trainer
