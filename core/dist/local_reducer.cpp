// LocalReducer: buckets cut into pieces that the replicas' threads take from a shared board
// between layers of backward and while the optimizer waits; each piece is summed in rank order.
#include "core/dist/local_reducer.h"

#include <algorithm>
#include <thread>

#include "core/dist/communicator.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TRAINER_CPU_RELAX() _mm_pause()
#else
#define TRAINER_CPU_RELAX() std::this_thread::yield()
#endif

namespace trainer {
namespace {

// 64 KiB of floats: a few microseconds of summing, small enough that two ranks share a bucket.
constexpr int64_t kPieceFloats = 16384;
// Pauses before a waiting rank sleeps (about a microsecond or two): long enough to catch a piece
// another rank is about to post, short enough not to take a busy core from a rank still computing.
constexpr int kSpins = 64;

template <class T>
std::unique_ptr<std::atomic<T>[]> zeros(size_t n) {
  auto a = std::make_unique<std::atomic<T>[]>(n);
  for (size_t i = 0; i < n; ++i) a[i].store(0, std::memory_order_relaxed);
  return a;
}

// out[i] (and every other rank's copy when `all`) = p[0][i] + p[1][i] + ... in rank order.
void sum_ranks(float* const* p, int ranks, int64_t n, bool all) {
  if (ranks == 2) {
    float* __restrict a = p[0];
    float* __restrict b = p[1];
    if (all)
      for (int64_t i = 0; i < n; ++i) a[i] = b[i] = a[i] + b[i];
    else
      for (int64_t i = 0; i < n; ++i) a[i] += b[i];
    return;
  }
  constexpr int64_t kBlock = 512;
  float acc[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t m = std::min(kBlock, n - at);
    std::copy(p[0] + at, p[0] + at + m, acc);
    for (int r = 1; r < ranks; ++r) {
      const float* __restrict x = p[r] + at;
      for (int64_t i = 0; i < m; ++i) acc[i] += x[i];
    }
    for (int r = 0; r < (all ? ranks : 1); ++r) std::copy(acc, acc + m, p[r] + at);
  }
}

}  // namespace

ReduceBoard::ReduceBoard(int ranks, std::vector<BucketRange> buckets, bool exchanged)
    : ranks_(ranks), buckets_(std::move(buckets)), exchanged_(exchanged), base_(size_t(ranks), nullptr) {
  const size_t n = buckets_.size();
  for (const BucketRange& r : buckets_) pieces_.push_back(int(std::max<int64_t>(1, (r.size() + kPieceFloats - 1) / kPieceFloats)));
  posted_ = zeros<uint64_t>(n * size_t(ranks));
  taken_ = zeros<uint64_t>(n);
  summed_ = zeros<uint64_t>(n);
  exchanged_step_ = zeros<uint64_t>(n);
  start_ns_ = zeros<int64_t>(n);
  end_ns_ = zeros<int64_t>(n);
  exchange_ns_ = zeros<int64_t>(n);
  all_started_ns_ = zeros<int64_t>(n);
}

void ReduceBoard::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(why_mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    why_ = why;
    aborted_.store(true, std::memory_order_release);
  }
  events_.fetch_add(1, std::memory_order_release);
  events_.notify_all();
}

LocalReducer::LocalReducer(std::shared_ptr<ReduceBoard> board, int rank, float* grads, std::unique_ptr<ProcessExchange> exchange)
    : b_(std::move(board)), rank_(rank), exchange_(std::move(exchange)) {
  b_->base_[size_t(rank_)] = grads;  // read by other ranks only after this rank's first post
  exchanging_.assign(b_->buckets_.size(), false);
  trace_.assign(b_->buckets_.size(), BucketTrace{});
}

void LocalReducer::start_step() {
  ++step_;
  t0_ = Clock::now();
  scan_ = next_exchange_ = b_->buckets_.size();
  work_s_ = skew_s_ = 0;
  for (size_t i = 0; i < trace_.size(); ++i) trace_[i] = BucketTrace{.pieces = b_->pieces_[i]};
}

void LocalReducer::notify() {
  b_->events_.fetch_add(1, std::memory_order_release);
  b_->events_.notify_all();
}

void LocalReducer::check_abort() const {
  if (!b_->aborted_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(b_->why_mu_);
  throw CommError("collective aborted: " + b_->why_);
}

double LocalReducer::seconds(int64_t ns) const {
  return double(ns - std::chrono::duration_cast<std::chrono::nanoseconds>(t0_.time_since_epoch()).count()) * 1e-9;
}

void LocalReducer::post(size_t bucket) {
  check_abort();
  trace_[bucket].ready = std::chrono::duration<double>(Clock::now() - t0_).count();
  b_->posted_[bucket * size_t(b_->ranks_) + size_t(rank_)].store(step_, std::memory_order_release);
  notify();
}

bool LocalReducer::done(size_t b) const {
  if (b_->exchanged_) return b_->exchanged_step_[b].load(std::memory_order_acquire) >= step_;
  return b_->summed_[b].load(std::memory_order_acquire) >= step_ * uint64_t(b_->pieces_[b]);
}

void LocalReducer::sum_piece(size_t b, int piece) {
  const auto t = Clock::now();
  const BucketRange& r = b_->buckets_[b];
  const int64_t at = r.begin + int64_t(piece) * kPieceFloats, n = std::min(kPieceFloats, r.end - at);
  float* p[64];
  std::vector<float*> many;
  float** ptrs = p;
  if (b_->ranks_ > 64) {
    many.resize(size_t(b_->ranks_));
    ptrs = many.data();
  }
  for (int q = 0; q < b_->ranks_; ++q) ptrs[q] = b_->base_[size_t(q)] + at;
  if (n > 0 && b_->ranks_ > 1) sum_ranks(ptrs, b_->ranks_, n, !b_->exchanged_);
  // The end of the bucket's last piece: the latest of its pieces' ends (times only grow).
  const int64_t end = now_ns();
  int64_t seen = b_->end_ns_[b].load(std::memory_order_relaxed);
  while (seen < end && !b_->end_ns_[b].compare_exchange_weak(seen, end, std::memory_order_relaxed)) {
  }
  b_->summed_[b].fetch_add(1, std::memory_order_acq_rel);  // publishes the sums (and the times)
  ++trace_[b].pieces_here;
  work_s_ += std::chrono::duration<double>(Clock::now() - t).count();
  notify();
}

bool LocalReducer::posted_by_all(size_t b) const {
  const size_t ranks = size_t(b_->ranks_);
  for (size_t q = 0; q < ranks; ++q)
    if (b_->posted_[b * ranks + q].load(std::memory_order_acquire) < step_) return false;
  return true;
}

bool LocalReducer::take_piece() {
  for (size_t b = scan_; b-- > 0;) {
    // Every rank posts buckets from the last down: the first one not posted by all ends the search.
    if (!posted_by_all(b)) return false;
    const uint64_t first = (step_ - 1) * uint64_t(b_->pieces_[b]), last = step_ * uint64_t(b_->pieces_[b]);
    uint64_t v = b_->taken_[b].load(std::memory_order_relaxed);
    while (v < last && !b_->taken_[b].compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) {
    }
    if (v < last) {
      if (v == first) b_->start_ns_[b].store(now_ns(), std::memory_order_relaxed);
      sum_piece(b, int(v - first));
      return true;
    }
    if (b + 1 == scan_) scan_ = b;  // nothing left to take here, this step
  }
  return false;
}

bool LocalReducer::drive_exchanges() {
  bool moved = false;
  const size_t ranks = size_t(b_->ranks_);
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0_).count(); };
  // Started in bucket order (the same in every process), each once the process's sum is complete.
  while (next_exchange_ > 0) {
    const size_t b = next_exchange_ - 1;
    if (b_->summed_[b].load(std::memory_order_acquire) < step_ * uint64_t(b_->pieces_[b])) break;
    const BucketRange& r = b_->buckets_[b];
    const int64_t t = now_ns();
    trace_[b].exchange_start = seconds(t);
    b_->exchange_ns_[b].store(t, std::memory_order_relaxed);  // published with exchanged_step_
    exchange_->start(b, b_->base_[0] + r.begin, r.size(), t);
    exchanging_[b] = true;
    --next_exchange_;
    moved = true;
  }
  for (size_t b = next_exchange_; b < exchanging_.size(); ++b) {
    if (!exchanging_[b]) continue;
    const bool complete = exchange_->test(b);
    if (complete) {
      const BucketRange& r = b_->buckets_[b];
      for (size_t q = 1; q < ranks; ++q) std::copy(b_->base_[0] + r.begin, b_->base_[0] + r.end, b_->base_[q] + r.begin);
      exchanging_[b] = false;
      trace_[b].exchange_end = since();
      b_->all_started_ns_[b].store(exchange_->last_start_ns(b), std::memory_order_relaxed);
      b_->exchanged_step_[b].store(step_, std::memory_order_release);
      notify();
      moved = true;
    }
  }
  return moved;
}

void LocalReducer::progress() {
  check_abort();
  while (take_piece()) {
  }
  if (exchange_) drive_exchanges();
}

void LocalReducer::wait(size_t bucket) {
  const int64_t entered = now_ns();
  double behind_s = 0;  // this call's wait for a replica of this process
  for (;;) {
    const uint32_t seen = b_->events_.load(std::memory_order_acquire);
    check_abort();
    if (done(bucket)) {
      if (b_->exchanged_) skew_s_ += std::max(0.0, process_skew(bucket, entered) - behind_s);
      return;
    }
    if (take_piece()) continue;
    if (exchange_) {
      if (drive_exchanges()) continue;
      // An exchange in flight: keep testing, yielding the core.
      if (std::find(exchanging_.begin(), exchanging_.end(), true) != exchanging_.end()) {
        exchange_->waiting();
        std::this_thread::yield();
        continue;
      }
    }
    const bool behind = !posted_by_all(bucket);  // another rank's backward has not reached it
    const auto t = Clock::now();
    int spins = 0;
    while (spins++ < kSpins && b_->events_.load(std::memory_order_relaxed) == seen) TRAINER_CPU_RELAX();
    if (b_->events_.load(std::memory_order_acquire) == seen) b_->events_.wait(seen, std::memory_order_acquire);
    if (behind) {
      const double s = std::chrono::duration<double>(Clock::now() - t).count();
      skew_s_ += s;
      behind_s += s;
    }
  }
}

double LocalReducer::process_skew(size_t b, int64_t entered) const {
  // The part of this wait before the last process started the bucket's exchange, if that was
  // later than this process's own start: that process's backward was behind.
  const int64_t own = b_->exchange_ns_[b].load(std::memory_order_relaxed);
  const int64_t all = b_->all_started_ns_[b].load(std::memory_order_relaxed);
  const int64_t from = std::max(entered, own), to = std::min(all, now_ns());
  return all > own && to > from ? double(to - from) * 1e-9 : 0.0;
}

const std::vector<BucketTrace>& LocalReducer::trace() const {
  for (size_t b = 0; b < trace_.size(); ++b) {
    if (!done(b)) continue;
    trace_[b].start = seconds(b_->start_ns_[b].load(std::memory_order_relaxed));
    trace_[b].end = seconds(b_->end_ns_[b].load(std::memory_order_relaxed));
    if (b_->exchanged_) trace_[b].exchange_all = seconds(b_->all_started_ns_[b].load(std::memory_order_relaxed));
  }
  return trace_;
}

}  // namespace trainer
