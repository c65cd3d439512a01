// Loader: shuffling, sharding, and the worker threads that prepare batches ahead of the consumer.
#include "core/data/loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

namespace trainer {

int default_workers(int replicas) {
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  return std::clamp(hw / (2 * std::max(1, replicas)), 1, 4);
}

namespace {
constexpr uint64_t kPermTag = 0x7065726d5f746167ULL;  // distinct streams for shuffling and augmenting
constexpr uint64_t kAugTag = 0x6175676d5f746167ULL;
}  // namespace

// Batches are claimed in order by the workers (at most `depth` ahead of the consumer), built
// without the lock, and handed over by index, so the consumer sees them in order whatever the
// timing. `generation` changes with every start_epoch, so late batches of an old epoch are dropped.
struct Loader::State {
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  bool stop = false, started = false;
  uint64_t generation = 0;
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<int64_t>> perm;
  int64_t num_batches = 0, next_claim = 0, next_consume = 0;
  int64_t depth = 1;
  std::map<int64_t, Slot> ready;
  std::exception_ptr failed;  // sticky until the next start_epoch
  std::vector<std::thread> threads;
};

namespace {

// Float samples (sequences, arrays) are copied as they are: refuse any augmentation rather than
// silently ignore it. Image sets get their transform; a placeholder serves float sets.
SampleTransform make_transform(const Dataset* ds, const LoaderOptions& opt) {
  if (!ds) throw std::invalid_argument("Loader: no dataset");
  if (!ds->float_samples()) {
    if (ds->sample_shape().rank() != 3) throw std::invalid_argument("Loader: samples must be H, W, C");
    return SampleTransform(opt.augment, ds->sample_shape(), opt.stats);
  }
  const Augment& a = opt.augment;
  std::vector<std::string> set;
  if (a.shift > 0) set.push_back(fmt::format("shift {}", a.shift));
  if (a.flip_horizontal || a.flip_vertical) set.push_back("flip");
  if (a.crop.enabled()) set.push_back("crop");
  if (a.mean != Augment::Mean::None) set.push_back("mean");
  if (a.scale != 1.f) set.push_back(fmt::format("scale {}", a.scale));
  if (!set.empty())
    throw std::invalid_argument(fmt::format("Loader: {} has float samples (sequences, arrays), which are used as they "
                                            "are: remove data.augment ({})",
                                            ds->describe(), fmt::join(set, ", ")));
  return SampleTransform(Augment{}, Shape{1, 1, 1}, nullptr);
}

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> ds, LoaderOptions opt)
    : ds_(std::move(ds)),
      opt_(std::move(opt)),
      transform_(make_transform(ds_.get(), opt_)),
      st_(std::make_unique<State>()) {
  shape_ = ds_->float_samples() ? ds_->sample_shape() : transform_.output_shape();
  if (opt_.batch_size < 1) throw std::invalid_argument("Loader: batch_size must be at least 1");
  if (opt_.replicas < 1 || opt_.rank < 0 || opt_.rank >= opt_.replicas)
    throw std::invalid_argument(fmt::format("Loader: rank {} of {} replicas", opt_.rank, opt_.replicas));
  if (opt_.workers < 0) throw std::invalid_argument("Loader: workers must be >= 0");
  st_->depth = std::max<int64_t>({1, opt_.prefetch, opt_.workers});
  for (int i = 0; i < opt_.workers; ++i) st_->threads.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->stop = true;
  }
  st_->work_cv.notify_all();
  for (auto& t : st_->threads) t.join();
}

std::vector<int64_t> Loader::permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  if (shuffle) {
    Rng rng{kPermTag, seed, uint64_t(epoch)};
    for (int64_t i = n - 1; i > 0; --i) std::swap(p[size_t(i)], p[size_t(rng.uniform_int(0, i))]);
  }
  return p;
}

int64_t Loader::batches_per_epoch() const {
  const int64_t n = ds_->size(), g = opt_.batch_size * opt_.replicas;
  return opt_.drop_last ? n / g : (n + g - 1) / g;
}

int64_t Loader::global_batch_size(int64_t k) const {
  const int64_t g = opt_.batch_size * opt_.replicas;
  return std::max<int64_t>(0, std::min(g, ds_->size() - k * g));
}

int64_t Loader::samples_per_epoch() const {
  const int64_t n = ds_->size(), g = opt_.batch_size * opt_.replicas, r = opt_.rank, R = opt_.replicas;
  int64_t s = (n / g) * opt_.batch_size;
  if (!opt_.drop_last) s += (r + 1) * (n % g) / R - r * (n % g) / R;
  return s;
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  if (first_batch < 0) throw std::invalid_argument("Loader::start_epoch: first_batch must be >= 0");
  auto perm = std::make_shared<const std::vector<int64_t>>(permutation(ds_->size(), opt_.seed, epoch, opt_.shuffle));
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    ++st_->generation;
    st_->epoch = epoch;
    st_->perm = std::move(perm);
    st_->num_batches = batches_per_epoch();
    st_->next_claim = st_->next_consume = std::min(first_batch, st_->num_batches);
    st_->ready.clear();
    st_->failed = nullptr;
    st_->started = true;
  }
  st_->work_cv.notify_all();
}

namespace {

// Test hook: TRAINER_TEST_STALL_LOADER=<k> makes batch k of the first epoch never come (the
// watchdog's test: a data loader that blocks).
int64_t stalled_batch() {
  static const int64_t k = [] {
    const char* s = std::getenv("TRAINER_TEST_STALL_LOADER");
    return s ? std::strtoll(s, nullptr, 10) : -1;
  }();
  return k;
}

}  // namespace

void Loader::produce(int64_t k, int64_t epoch, const std::vector<int64_t>& perm, Batch& out) const {
  if (k == stalled_batch() && epoch == 0) {
    std::fprintf(stderr, "test hook: the loader holds batch %lld\n", (long long)k);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  const int64_t n = int64_t(perm.size()), R = opt_.replicas, g = opt_.batch_size * R;
  const int64_t first = k * g, m_global = std::min(g, n - first);
  const int64_t lo = first + opt_.rank * m_global / R, hi = first + (opt_.rank + 1) * m_global / R, m = hi - lo;
  Allocator& alloc = opt_.allocator ? *opt_.allocator : host_allocator();
  out.images = Tensor::empty(shape_.with_batch(m), DType::F32, alloc);
  const Shape label_shape = ds_->label_shape();
  const int64_t per_sample = label_shape.numel();  // 1 for {}
  out.labels = Tensor::empty(label_shape.with_batch(m), DType::I32, alloc);
  out.size = m;
  out.global_size = m_global;
  out.index = k;
  out.indices.assign(perm.begin() + lo, perm.begin() + hi);
  const size_t elems = size_t(shape_.numel());
  const bool floats = ds_->float_samples();
  std::vector<uint8_t> px(floats ? 0 : size_t(ds_->sample_shape().numel()));
  float* images = out.images.f32();
  int32_t* labels = out.labels.i32();
  const bool random = opt_.augment.random();
  const int classes = ds_->num_classes();
  // An ignored label may lie outside the classes (-100, PyTorch's ignore_index default).
  const auto outside = [&](int32_t l) { return (l < 0 || l >= classes) && !(opt_.ignore_class && l == *opt_.ignore_class); };
  for (int64_t j = 0; j < m; ++j) {
    const int64_t idx = out.indices[size_t(j)];
    if (floats) {
      int32_t* own = labels + j * per_sample;
      ds_->get_f32_labels(idx, images + size_t(j) * elems, own);
      for (int64_t p = 0; p < per_sample; ++p)
        if (outside(own[p]))
          throw DataError(fmt::format("{}: sample {} has label {}{}, outside 0..{}", ds_->describe(), idx, own[p],
                                      per_sample > 1 ? fmt::format(" at position {}", p) : "", classes - 1));
      continue;
    }
    const int32_t label = ds_->get(idx, px.data());
    if (outside(label))
      throw DataError(fmt::format("{}: sample {} has label {}, outside 0..{}", ds_->describe(), idx, label,
                                  classes - 1));
    RandomParams p;
    if (random) {
      Rng rng{kAugTag, opt_.seed, uint64_t(epoch), uint64_t(idx)};
      p = transform_.draw(rng);
    }
    transform_.apply(px.data(), images + size_t(j) * elems, p);
    labels[j] = label;
  }
  out.global_scored = opt_.ignore_class ? count_scored(k, perm, &out) : m_global * per_sample;
}

int64_t Loader::count_scored(int64_t k, const std::vector<int64_t>& perm, const Batch* own) const {
  const int64_t n = int64_t(perm.size()), R = opt_.replicas, g = opt_.batch_size * R;
  const int64_t first = k * g, m_global = std::max<int64_t>(0, std::min(g, n - first));
  const int64_t lo = first + opt_.rank * m_global / R, hi = first + (opt_.rank + 1) * m_global / R;
  const int64_t per = ds_->label_shape().numel();
  const int32_t ignore = opt_.ignore_class.value_or(0);
  std::vector<int32_t> buf(static_cast<size_t>(per));
  int64_t scored = 0;
  for (int64_t j = first; j < first + m_global; ++j) {
    const int32_t* l = buf.data();
    if (own && j >= lo && j < hi) l = own->labels.i32() + (j - lo) * per;
    else ds_->get_labels(perm[size_t(j)], buf.data());
    for (int64_t p = 0; p < per; ++p) scored += l[p] != ignore;
  }
  return scored;
}

int64_t Loader::global_scored(int64_t k) const {
  if (!opt_.ignore_class) return global_batch_size(k) * ds_->label_shape().numel();
  int64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    if (!st_->perm) throw std::logic_error("Loader::global_scored called before start_epoch");
    epoch = st_->epoch;
  }
  return global_scored(k, epoch);
}

int64_t Loader::global_scored(int64_t k, int64_t epoch) const {
  if (!opt_.ignore_class) return global_batch_size(k) * ds_->label_shape().numel();
  std::shared_ptr<const std::vector<int64_t>> perm;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    if (st_->epoch == epoch) perm = st_->perm;
  }
  if (perm) return count_scored(k, *perm, nullptr);
  return count_scored(k, permutation(ds_->size(), opt_.seed, epoch, opt_.shuffle), nullptr);  // another pass's
}

int64_t scored_labels(const Batch& b) {
  if (b.global_scored > 0) return b.global_scored;
  const int64_t samples = b.global_size > 0 ? b.global_size : (b.images.defined() ? b.images.dim(0) : b.size);
  int64_t per = 1;  // labels [N] or [N, T]
  for (size_t i = 1; i < b.labels.shape().rank(); ++i) per *= b.labels.shape()[i];
  return samples * per;
}

void Loader::worker_loop() {
  State& s = *st_;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    s.work_cv.wait(lock, [&] {
      return s.stop || (s.started && s.next_claim < s.num_batches && s.next_claim < s.next_consume + s.depth);
    });
    if (s.stop) return;
    const int64_t k = s.next_claim++, epoch = s.epoch;
    const uint64_t generation = s.generation;
    std::shared_ptr<const std::vector<int64_t>> perm = s.perm;
    lock.unlock();
    State::Slot slot;
    try {
      produce(k, epoch, *perm, slot.batch);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    if (generation == s.generation) {
      s.ready.emplace(k, std::move(slot));
      s.ready_cv.notify_all();
    }
  }
}

bool Loader::next(Batch& b) {
  State& s = *st_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.started) throw std::logic_error("Loader::next called before start_epoch");
  if (s.failed) std::rethrow_exception(s.failed);
  if (s.next_consume >= s.num_batches) return false;
  if (opt_.workers == 0) {  // synchronous: prepare it here
    const int64_t k = s.next_consume, epoch = s.epoch;
    std::shared_ptr<const std::vector<int64_t>> perm = s.perm;
    lock.unlock();
    Batch out;
    try {
      produce(k, epoch, *perm, out);
    } catch (...) {
      lock.lock();
      s.failed = std::current_exception();
      throw;
    }
    lock.lock();
    ++s.next_consume;
    b = std::move(out);
    return true;
  }
  s.ready_cv.wait(lock, [&] { return s.ready.count(s.next_consume) > 0; });
  auto node = s.ready.extract(s.next_consume);
  ++s.next_consume;
  s.work_cv.notify_all();  // the window moved: workers may claim more
  if (node.mapped().error) {
    s.failed = node.mapped().error;
    std::rethrow_exception(s.failed);
  }
  b = std::move(node.mapped().batch);
  return true;
}

}  // namespace trainer
