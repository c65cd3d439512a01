// LocalComm: rendezvous-based collectives among threads. An all-reduce is a reduce-scatter and
// an all-gather in one: rank r sums slice r of every rank's buffer (in rank order) and writes it
// back into every buffer; slices are disjoint, so ranks never write the same memory.
#include "core/dist/local_comm.h"

#include <fmt/format.h>

namespace trainer {

LocalGroup::LocalGroup(int size)
    : size_(size), contexts_(size_t(size), nullptr), ptrs_(size_t(size)), arrived_(size_t(size), 0),
      departed_(size_t(size), 0), host_(size_t(size)) {}

bool LocalGroup::one_device() const {
  for (OpContext* c : contexts_)
    if (!c || !(c->device() == contexts_[0]->device())) return false;
  return true;
}

void LocalGroup::check() const {
  if (aborted_) throw CommError("collective aborted: " + why_);
}

void LocalGroup::arrive(int rank, uint64_t seq, void* ptr) {
  std::unique_lock<std::mutex> lock(mu_);
  check();
  ptrs_[size_t(rank)] = ptr;
  arrived_[size_t(rank)] = seq;
  cv_.notify_all();
  cv_.wait(lock, [&] {
    if (aborted_) return true;
    for (uint64_t a : arrived_)
      if (a < seq) return false;
    return true;
  });
  check();
}

void LocalGroup::depart(int rank, uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  check();
  departed_[size_t(rank)] = seq;
  cv_.notify_all();
  // Nobody may reuse (or free) its buffer for the next collective before every rank is done
  // reading and writing this one.
  cv_.wait(lock, [&] {
    if (aborted_) return true;
    for (uint64_t d : departed_)
      if (d < seq) return false;
    return true;
  });
  check();
}

void LocalGroup::abort(const std::string& why) {
  std::vector<std::shared_ptr<ReduceBoard>> boards;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) why_ = why;
    aborted_ = true;
    boards = boards_;
    cv_.notify_all();
  }
  for (auto& b : boards) b->abort(why_);
}

std::shared_ptr<ReduceBoard> LocalGroup::board(size_t index, const std::vector<BucketRange>& buckets, bool exchanged) {
  std::shared_ptr<ReduceBoard> b;
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted = aborted_;
    if (boards_.size() <= index) {
      boards_.resize(index + 1);
      board_buckets_.resize(index + 1);
    }
    if (!boards_[index]) {
      boards_[index] = std::make_shared<ReduceBoard>(size_, buckets, exchanged);
      board_buckets_[index] = buckets;
    }
    const auto& first = board_buckets_[index];
    if (boards_[index]->exchanged() != exchanged)
      throw CommError(fmt::format("bucket reducer {}: the ranks disagree on exchanging with other processes", index));
    bool same = first.size() == buckets.size();
    for (size_t i = 0; same && i < buckets.size(); ++i) same = first[i].begin == buckets[i].begin && first[i].end == buckets[i].end;
    if (!same)
      throw CommError(fmt::format("bucket reducer {}: a rank's {} gradient buckets differ from another's {}", index,
                                  buckets.size(), first.size()));
    b = boards_[index];
  }
  if (aborted) b->abort("collective aborted before the gradient reducer was made");
  return b;
}

LocalComm::LocalComm(std::shared_ptr<LocalGroup> group, int rank, OpContext& ctx)
    : group_(std::move(group)), rank_(rank), ctx_(ctx), k_(make_kernel<ElementwiseKernel>(ctx, {})) {
  group_->contexts_.at(size_t(rank)) = &ctx;
}

void LocalComm::all_reduce_sum(Tensor& buf) {
  int n = size();
  if (n == 1) return;
  uint64_t seq = ++seq_;
  ctx_.synchronize();  // this rank's writes to buf are complete before others read it
  group_->arrive(rank_, seq, buf.data());
  int64_t len = buf.numel();
  int64_t begin = len * rank_ / n, end = len * (rank_ + 1) / n;
  if (end > begin) {
    std::vector<Tensor> parts;
    std::vector<const Tensor*> xs;
    for (int q = 0; q < n; ++q)
      parts.push_back(Tensor::view(static_cast<float*>(group_->pointer(q)) + begin, Shape{end - begin}, DType::F32, buf.device()));
    for (const Tensor& t : parts) xs.push_back(&t);
    if (!scratch_.defined() || scratch_.numel() < end - begin) scratch_ = ctx_.empty(Shape{end - begin});
    Tensor sum = scratch_.slice(0, end - begin);
    k_->add(xs, sum);
    for (Tensor& t : parts) ctx_.copy(t.data(), sum.data(), sum.bytes());
    ctx_.synchronize();
  }
  group_->depart(rank_, seq);
}

std::unique_ptr<BucketReducer> LocalComm::make_bucket_reducer(Tensor& grads, const std::vector<BucketRange>& buckets) {
  if (!grads.device().is_cpu()) return nullptr;
  return make_bucket_reducer(grads, buckets, false, nullptr);
}

std::unique_ptr<BucketReducer> LocalComm::make_bucket_reducer(Tensor& grads, const std::vector<BucketRange>& buckets,
                                                              bool exchanged, std::unique_ptr<ProcessExchange> exchange) {
  if (grads.dtype() != DType::F32 || !grads.device().is_cpu())
    throw CommError(fmt::format("bucket reducer: rank {} got a {} tensor on {}, only f32 host memory is summed by threads", rank_,
                                dtype_name(grads.dtype()), grads.device().str()));
  for (const BucketRange& r : buckets)
    if (r.begin < 0 || r.end < r.begin || r.end > grads.numel())
      throw CommError(fmt::format("bucket reducer: bucket [{}, {}) lies outside {} gradients", r.begin, r.end, grads.numel()));
  if ((rank_ == 0 && exchanged != (exchange != nullptr)) || (rank_ != 0 && exchange))
    throw CommError(fmt::format("bucket reducer: rank {}: only local rank 0 exchanges with other processes", rank_));
  auto board = group_->board(reducers_++, buckets, exchanged);
  return std::make_unique<LocalReducer>(std::move(board), rank_, grads.f32(), std::move(exchange));
}

void LocalComm::broadcast(Tensor& buf, int root) {
  if (size() == 1) return;
  uint64_t seq = ++seq_;
  ctx_.synchronize();
  group_->arrive(rank_, seq, buf.data());
  if (rank_ != root) {
    ctx_.copy(buf.data(), group_->pointer(root), buf.bytes());
    ctx_.synchronize();
  }
  group_->depart(rank_, seq);
}

void LocalComm::all_reduce_host(std::vector<double>& values) {
  if (size() == 1) return;
  uint64_t seq = ++seq_;
  group_->arrive(rank_, seq, &values);
  // Every rank sums all ranks' values itself, in rank order (identical results everywhere).
  std::vector<double> total(values.size(), 0.0);
  for (int q = 0; q < size(); ++q) {
    const auto& v = *static_cast<std::vector<double>*>(group_->pointer(q));
    if (v.size() != values.size())
      throw CommError(fmt::format("all_reduce_host: rank {} sent {} values, rank {} sent {}", q, v.size(), rank_, values.size()));
    for (size_t i = 0; i < v.size(); ++i) total[i] += v[i];
  }
  group_->depart(rank_, seq);  // nobody overwrites `values` until everyone has read it
  values = std::move(total);
}

void LocalComm::barrier() {
  if (size() == 1) return;
  uint64_t seq = ++seq_;
  group_->arrive(rank_, seq, nullptr);
  group_->depart(rank_, seq);
}

bool LocalComm::records() const { return ctx_.can_capture() && group_->one_device(); }

void LocalGroup::set_inbox(int rank, void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  inboxes_.resize(size_t(size_));
  inboxes_[size_t(rank)] = p;
}

std::vector<void*> LocalGroup::inboxes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<void*> v = inboxes_;
  v.resize(size_t(size_));
  return v;
}

void* LocalComm::inbox(size_t bytes) {
  if (!inbox_.defined() || inbox_.bytes() < bytes) {
    inbox_ = ctx_.empty(Shape{int64_t((bytes + 3) / 4)});
    group_->set_inbox(rank_, inbox_.data());
  }
  return inbox_.data();
}

std::vector<void*> LocalComm::meet() {
  // Run now: the inboxes as the ranks left them at the rendezvous. Recorded: those registered now
  // (by the step's last run as called), checked on every replay.
  auto at = std::make_shared<std::vector<void*>>();
  const bool recorded = ctx_.capturing();
  if (recorded) *at = group_->inboxes();
  ctx_.host_step([this, at, recorded] {
    const uint64_t seq = ++seq_;
    ctx_.mark_queue();
    group_->arrive(rank_, seq, nullptr);
    for (int q = 0; q < size(); ++q)
      if (q != rank_) ctx_.wait_for_mark(*group_->context(q));
    std::vector<void*> now = group_->inboxes();
    group_->depart(rank_, seq);
    if (!recorded)
      *at = std::move(now);
    else if (*at != now)
      throw CommError(fmt::format("rank {}: a recorded collective meets other inboxes than it was recorded with", rank_));
  });
  return *at;
}

// Every rank sums the inboxes in rank order into its buffer.
void LocalComm::issue_all_reduce_sum(Tensor& buf) {
  const int64_t n = buf.numel();
  if (size() == 1 || n == 0) return;
  if (buf.dtype() != DType::F32)
    throw CommError(fmt::format("all_reduce_sum: rank {} got a {} tensor, only f32 is summed", rank_, dtype_name(buf.dtype())));
  ctx_.copy(inbox(buf.bytes()), buf.data(), buf.bytes());
  const std::vector<void*> at = meet();
  std::vector<Tensor> parts;
  std::vector<const Tensor*> xs;
  for (void* p : at) parts.push_back(Tensor::view(p, Shape{n}, DType::F32, buf.device()));
  for (const Tensor& t : parts) xs.push_back(&t);
  k_->add(xs, buf);
  meet();  // every rank has read every inbox
}

void LocalComm::issue_broadcast(Tensor& buf, int root) {
  if (root < 0 || root >= size()) throw CommError(fmt::format("broadcast: root {} out of 0..{}", root, size() - 1));
  if (size() == 1 || buf.bytes() == 0) return;
  if (rank_ == root) ctx_.copy(inbox(buf.bytes()), buf.data(), buf.bytes());
  const std::vector<void*> at = meet();
  if (rank_ != root) ctx_.copy(buf.data(), at[size_t(root)], buf.bytes());
  meet();
}

void LocalComm::issue_all_gather(Tensor& buf) {
  const int64_t n = gather_part(buf);
  if (size() == 1 || n == 0) return;
  const size_t bytes = size_t(n) * dtype_size(buf.dtype());
  char* mine = static_cast<char*>(buf.data());
  ctx_.copy(inbox(bytes), mine + size_t(rank_) * bytes, bytes);
  const std::vector<void*> at = meet();
  for (int q = 0; q < size(); ++q)
    if (q != rank_) ctx_.copy(mine + size_t(q) * bytes, at[size_t(q)], bytes);
  meet();
}

std::vector<std::unique_ptr<Communicator>> make_local_comms(const std::vector<OpContext*>& contexts) {
  auto group = std::make_shared<LocalGroup>(int(contexts.size()));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < contexts.size(); ++r) out.push_back(std::make_unique<LocalComm>(group, int(r), *contexts[r]));
  return out;
}

}  // namespace trainer
