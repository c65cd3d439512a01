// Bucketed gradient all-reduce: by the worker threads themselves (host memory) or on a
// communication thread (device memory), and the bucket plan.
#include "core/runtime/data_parallel/grad_buckets.h"

#include <algorithm>

namespace trainer {

std::vector<BucketRange> plan_buckets(int64_t floats, const std::vector<int64_t>& cuts, int64_t bucket_floats, bool cooperative) {
  const int64_t n = floats;
  std::vector<int64_t> c(cuts.begin(), cuts.end());
  c.push_back(n);
  std::sort(c.begin(), c.end());
  // Targets for the first bucket (backward's first: the last parameters) and the rest.
  int64_t first = bucket_floats, rest = bucket_floats;
  if (bucket_floats <= 0 && cooperative) first = rest = std::clamp<int64_t>(n / 16, int64_t(64) << 10, int64_t(256) << 10);
  if (bucket_floats <= 0 && !cooperative) first = (int64_t(1) << 20) / 4, rest = (int64_t(25) << 20) / 4;
  std::vector<BucketRange> out;
  // Walk down from the end: backward finishes the last parameters first.
  int64_t end = n;
  for (size_t i = c.size(); i-- > 0;) {
    const int64_t cut = std::clamp<int64_t>(c[i], 0, n);
    if (end - cut >= (out.empty() ? first : rest) || (cut == 0 && end > 0)) {
      out.push_back({cut, end});
      end = cut;
    }
  }
  if (end > 0 || out.empty()) out.push_back({0, end});
  std::reverse(out.begin(), out.end());
  return out;
}

GradBuckets::GradBuckets(Tensor grads, const std::vector<int64_t>& cuts, int64_t bucket_floats, Communicator& comm,
                         OpContext& ctx)
    : grads_(grads), comm_(comm), ctx_(ctx) {
  solo_ = comm.size() == 1;
  // Whether the communicator lets the ranks' threads reduce (host memory) decides the plan, and
  // the plan must be the same on every rank: the device kind is.
  const bool cooperative = !solo_ && grads.device().is_cpu();
  buckets_ = plan_buckets(grads.numel(), cuts, bucket_floats, cooperative);
  if (cooperative) reducer_ = comm.make_bucket_reducer(grads_, buckets_);
  done_.assign(buckets_.size(), false);
  trace_.assign(buckets_.size(), BucketTrace{});
  if (!solo_ && !reducer_) thread_ = std::thread([this] { loop(); });
}

GradBuckets::~GradBuckets() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const char* GradBuckets::reduced_by() const {
  if (solo_) return "none";
  return reducer_ ? "worker threads" : "communication thread";
}

void GradBuckets::start_step() {
  exposed_s_ = 0;
  next_ready_ = buckets_.size();
  if (reducer_) {
    t0_ = Clock::now();
    reducer_->start_step();
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  t0_ = Clock::now();  // the communication thread reads it
  std::fill(done_.begin(), done_.end(), false);
  for (size_t i = 0; i < trace_.size(); ++i) trace_[i] = BucketTrace{.pieces = 1};
  reduce_s_ = 0;
}

void GradBuckets::on_frontier(int64_t frontier) {
  if (reducer_) {
    while (next_ready_ > 0 && buckets_[next_ready_ - 1].begin >= frontier) reducer_->post(--next_ready_);
    reducer_->progress();
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const double now = std::chrono::duration<double>(Clock::now() - t0_).count();
  while (next_ready_ > 0 && buckets_[next_ready_ - 1].begin >= frontier) {
    --next_ready_;
    trace_[next_ready_].ready = now;
    if (solo_) {
      done_[next_ready_] = true;
    } else {
      queue_.push_back(next_ready_);
    }
  }
  if (!solo_) cv_.notify_all();
}

void GradBuckets::progress() {
  if (reducer_) reducer_->progress();
}

void GradBuckets::wait(size_t i) {
  const auto t0 = Clock::now();
  if (reducer_) {
    reducer_->wait(i);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_[i] || error_; });
    if (error_) std::rethrow_exception(error_);
  }
  exposed_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

double GradBuckets::reduce_seconds() const {
  if (!reducer_) return reduce_s_;
  // Summing, plus the wall time during which an exchange with other processes was in flight once
  // every process had started it (the union of those intervals: several overlap). Before, it
  // waited for a process whose backward was behind: skew.
  std::vector<std::pair<double, double>> spans;
  for (const BucketTrace& t : reducer_->trace()) {
    const double from = std::max(t.exchange_start, t.exchange_all);
    if (t.exchange_start >= 0 && t.exchange_end >= from) spans.emplace_back(from, t.exchange_end);
  }
  std::sort(spans.begin(), spans.end());
  double s = reducer_->work_seconds(), reach = -1;
  for (const auto& [a, z] : spans) {
    if (z <= reach) continue;
    s += z - std::max(a, reach);
    reach = z;
  }
  return s;
}

std::vector<BucketTrace> GradBuckets::trace() const {
  if (reducer_) return reducer_->trace();
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
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
    const auto t0 = Clock::now();
    try {
      Tensor part = grads_.slice(buckets_[b].begin, buckets_[b].end);
      comm_.all_reduce_sum(part);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    const auto t1 = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    reduce_s_ += std::chrono::duration<double>(t1 - t0).count();
    trace_[b].start = std::chrono::duration<double>(t0 - t0_).count();
    trace_[b].end = std::chrono::duration<double>(t1 - t0_).count();
    done_[b] = true;
    cv_.notify_all();
  }
}

}  // namespace trainer
