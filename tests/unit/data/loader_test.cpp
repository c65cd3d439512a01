// Tests of the Loader: epoch coverage, drop_last, replica shards, determinism, errors, shutdown.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "core/data/loader.h"
#include "core/data/memory_dataset.h"
#include "data_test_util.h"

using namespace trainer;

namespace {

// n samples of 2x2x1: every pixel of sample i is i % 256, its label i % 5.
std::shared_ptr<MemoryDataset> counting(int n) {
  std::vector<uint8_t> px;
  std::vector<int32_t> labels;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < 4; ++k) px.push_back(uint8_t(i % 256));
    labels.push_back(i % 5);
  }
  return std::make_shared<MemoryDataset>(Shape{2, 2, 1}, 5, std::move(px), std::move(labels), "counting");
}

// Wraps a dataset: sleeps in get() and throws for one index.
class Tricky final : public Dataset {
 public:
  Tricky(std::shared_ptr<const Dataset> base, int64_t bad, int sleep_us) : base_(base), bad_(bad), sleep_us_(sleep_us) {}
  int64_t size() const override { return base_->size(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  std::string describe() const override { return "tricky"; }
  int32_t get(int64_t i, uint8_t* px) const override {
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (i == bad_) throw DataError("sample " + std::to_string(i) + " is bad");
    return base_->get(i, px);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t bad_;
  int sleep_us_;
};

LoaderOptions opts(int64_t batch, int workers, bool shuffle = true, bool drop_last = false) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = 11;
  return o;
}

std::vector<Batch> epoch(Loader& l, int64_t e) {
  l.start_epoch(e);
  std::vector<Batch> out;
  Batch b;
  while (l.next(b)) out.push_back(std::move(b));
  return out;
}

std::vector<int64_t> all_indices(const std::vector<Batch>& bs) {
  std::vector<int64_t> v;
  for (const auto& b : bs) v.insert(v.end(), b.indices.begin(), b.indices.end());
  return v;
}

std::vector<float> all_pixels(const std::vector<Batch>& bs) {
  std::vector<float> v;
  for (const auto& b : bs) v.insert(v.end(), b.images.f32(), b.images.f32() + b.images.numel());
  return v;
}

}  // namespace

TEST_CASE("loader: an epoch covers every sample once, with a final partial batch") {
  auto ds = counting(103);
  Loader l(ds, opts(10, 2));
  CHECK(l.batches_per_epoch() == 11);
  CHECK(l.samples_per_epoch() == 103);
  auto bs = epoch(l, 0);
  REQUIRE(bs.size() == 11);
  CHECK(bs.back().size == 3);
  CHECK(bs.back().images.shape() == Shape{3, 2, 2, 1});
  CHECK(bs.back().labels.shape() == Shape{3});
  for (const auto& b : bs) {
    for (int64_t j = 0; j < b.size; ++j) {
      CHECK(b.images.f32()[j * 4 + 3] == float(b.indices[size_t(j)] % 256));
      CHECK(b.labels.i32()[j] == b.indices[size_t(j)] % 5);
    }
  }
  auto idx = all_indices(bs);
  CHECK(idx != Loader::permutation(103, 11, 0, false));  // shuffled
  std::sort(idx.begin(), idx.end());
  CHECK(idx == Loader::permutation(103, 11, 0, false));
  CHECK(all_indices(epoch(l, 1)) != all_indices(bs));     // a new order each epoch
  CHECK(all_indices(epoch(l, 0)) == all_indices(bs));     // the same order for the same epoch
  Batch b;
  CHECK(!l.next(b));  // stays finished
}

TEST_CASE("loader: drop_last drops the partial batch, no shuffle keeps order") {
  auto ds = counting(103);
  Loader l(ds, opts(10, 1, false, true));
  CHECK(l.batches_per_epoch() == 10);
  CHECK(l.samples_per_epoch() == 100);
  auto bs = epoch(l, 3);
  REQUIRE(bs.size() == 10);
  auto idx = all_indices(bs);
  CHECK(idx == std::vector<int64_t>(Loader::permutation(100, 0, 0, false)));
  Loader small(counting(7), opts(10, 1, true, true));
  CHECK(small.batches_per_epoch() == 0);
  CHECK(epoch(small, 0).empty());
}

TEST_CASE("loader: replica shards are disjoint, cover the epoch and match one big batch") {
  auto ds = counting(103);
  auto shard = [&](int rank, int replicas, int64_t batch) {
    LoaderOptions o = opts(batch, 2);
    o.rank = rank, o.replicas = replicas;
    Loader l(ds, o);
    auto bs = epoch(l, 5);
    CHECK(int64_t(bs.size()) == l.batches_per_epoch());
    return bs;
  };
  auto r0 = shard(0, 2, 10), r1 = shard(1, 2, 10), one = shard(0, 1, 20);
  REQUIRE(r0.size() == 6);
  REQUIRE(r1.size() == 6);
  REQUIRE(one.size() == 6);
  for (size_t k = 0; k < 6; ++k) {
    std::vector<int64_t> cat = r0[k].indices;
    cat.insert(cat.end(), r1[k].indices.begin(), r1[k].indices.end());
    CHECK(cat == one[k].indices);
    CHECK(r0[k].global_size == one[k].size);
  }
  CHECK(r0.back().size == 1);  // final 3 samples split 1 + 2
  CHECK(r1.back().size == 2);
  auto a = all_indices(r0), b = all_indices(r1);
  std::vector<int64_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  std::sort(both.begin(), both.end());
  CHECK(both == Loader::permutation(103, 0, 0, false));
  // Fewer samples than replicas in the last step: some replicas get an empty batch.
  auto tiny = counting(2);
  std::vector<int64_t> sizes;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions o = opts(1, 1);
    o.rank = r, o.replicas = 3;
    Loader l(tiny, o);
    auto bs = epoch(l, 0);
    REQUIRE(bs.size() == 1);
    sizes.push_back(bs[0].size);
    CHECK(bs[0].images.shape()[0] == bs[0].size);
    CHECK(l.samples_per_epoch() == bs[0].size);
  }
  CHECK(sizes == std::vector<int64_t>{0, 1, 1});
  CHECK_THROWS_AS(Loader(ds, [] { LoaderOptions o; o.rank = 2, o.replicas = 2; return o; }()), std::invalid_argument);
}

TEST_CASE("loader: results do not depend on runs, worker count or timing") {
  auto ds = test::dataset_from("{type: synthetic, size: 90, image_size: 12}");
  LoaderOptions o = opts(8, 0);
  o.augment.shift = 0.2f;
  o.augment.flip_horizontal = o.augment.flip_vertical = true;
  o.augment.mean = Augment::Mean::PerPixel;
  o.augment.scale = 1 / 255.f;
  o.stats = std::make_shared<NormStats>(compute_stats(*ds, Augment::Mean::PerPixel));
  std::vector<float> ref;
  {
    Loader l(ds, o);
    ref = all_pixels(epoch(l, 2));
    CHECK(all_pixels(epoch(l, 3)) != ref);
  }
  for (int workers : {1, 3, 4}) {
    o.workers = workers;
    o.prefetch = workers == 4 ? 1 : 3;
    Loader l(ds, o);
    CHECK(all_pixels(epoch(l, 2)) == ref);
  }
  // The augmentation of a sample depends on (seed, epoch, index) only, not on its batch or shard.
  o.workers = 2;
  o.batch_size = 3;
  o.replicas = 2;
  Loader l(ds, o);
  auto bs = epoch(l, 2);
  Loader whole(ds, [&] { LoaderOptions w = o; w.batch_size = 8, w.replicas = 1; return w; }());
  auto wb = epoch(whole, 2);
  std::map<int64_t, std::vector<float>> by_index;
  for (const auto& b : wb)
    for (int64_t j = 0; j < b.size; ++j)
      by_index[b.indices[size_t(j)]] = std::vector<float>(b.images.f32() + j * 432, b.images.f32() + (j + 1) * 432);
  for (const auto& b : bs)
    for (int64_t j = 0; j < b.size; ++j)
      CHECK(by_index.at(b.indices[size_t(j)]) == std::vector<float>(b.images.f32() + j * 432, b.images.f32() + (j + 1) * 432));
}

TEST_CASE("loader: the shuffle draws every order equally often, a new one each epoch") {
  // Every permutation of 4 samples over 24,000 (seed, epoch) pairs: each of the 24 about 1,000
  // times (a standard deviation of ~31; 150 is ~5 of them). A biased shuffle fails: Sattolo's
  // variant (the swap partner drawn below i) makes only the 6 cyclic orders.
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t seed = 0; seed < 240; ++seed)
    for (int64_t e = 0; e < 100; ++e) ++counts[Loader::permutation(4, seed, e, true)];
  CHECK(counts.size() == 24);
  for (const auto& [order, n] : counts) {
    INFO(order[0] << order[1] << order[2] << order[3]);
    CHECK(n > 850);
    CHECK(n < 1150);
  }
  // Two samples: both orders; one: itself; no shuffle: the identity.
  std::map<std::vector<int64_t>, int> two;
  for (int64_t e = 0; e < 200; ++e) ++two[Loader::permutation(2, 5, e, true)];
  CHECK(two.size() == 2);
  CHECK(Loader::permutation(1, 5, 3, true) == std::vector<int64_t>{0});
  CHECK(Loader::permutation(3, 5, 3, false) == std::vector<int64_t>{0, 1, 2});
}

TEST_CASE("loader: a sample's random augmentation is drawn anew each epoch, the same on a rerun") {
  auto ds = test::dataset_from("{type: synthetic, size: 40, image_size: 12}");
  LoaderOptions o = opts(8, 2, false);  // no shuffle: batch j holds the same samples every epoch
  o.augment.shift = 0.2f;
  o.augment.flip_horizontal = true;
  Loader l(ds, o);
  const std::vector<Batch> a = epoch(l, 2), b = epoch(l, 3);
  CHECK(all_indices(a) == all_indices(b));
  // Per sample: the same image in epoch 2 as in a rerun of it, another in epoch 3 for nearly all
  // (the same draw — flip and both shifts in [-2, 2] — has a chance of 1/50).
  const std::vector<float> pa = all_pixels(a), pb = all_pixels(b), again = all_pixels(epoch(l, 2));
  CHECK(pa == again);
  const size_t per = 12 * 12 * 3;
  REQUIRE(pa.size() == 40 * per);
  int differ = 0;
  for (size_t i = 0; i < 40; ++i)
    differ += !std::equal(pa.begin() + i * per, pa.begin() + (i + 1) * per, pb.begin() + i * per);
  CHECK(differ >= 34);
}

TEST_CASE("loader: per-pixel mean is removed from the training set") {
  auto ds = test::dataset_from("{type: synthetic, size: 50, image_size: 6}");
  LoaderOptions o = opts(7, 2);
  o.augment.mean = Augment::Mean::PerPixel;
  CHECK_THROWS_AS(Loader(ds, o), std::invalid_argument);  // stats are required
  o.stats = std::make_shared<NormStats>(compute_stats(*ds, Augment::Mean::PerPixel));
  Loader l(ds, o);
  auto px = all_pixels(epoch(l, 0));
  REQUIRE(px.size() == 50 * 108);
  for (size_t e = 0; e < 108; ++e) {
    double s = 0;
    for (size_t i = 0; i < 50; ++i) s += px[i * 108 + e];
    CHECK(std::abs(s / 50) < 1e-3);
  }
}

TEST_CASE("loader: a worker's exception is rethrown by next() at its batch") {
  auto ds = std::make_shared<Tricky>(counting(100), 57, 0);
  for (int workers : {0, 3}) {
    Loader l(ds, opts(10, workers, false));
    l.start_epoch(0);
    Batch b;
    for (int k = 0; k < 5; ++k) REQUIRE(l.next(b));
    CHECK_THROWS_WITH(l.next(b), "sample 57 is bad");
    CHECK_THROWS_AS(l.next(b), DataError);  // sticky until the next epoch
    l.start_epoch(1);
    REQUIRE(l.next(b));
    CHECK(b.index == 0);
  }
  Loader fresh(counting(10), opts(5, 1));
  Batch b;
  CHECK_THROWS_AS(fresh.next(b), std::logic_error);
}

TEST_CASE("loader: restarting or destroying mid-epoch neither hangs nor mixes epochs") {
  auto slow = std::make_shared<Tricky>(counting(400), -1, 200);
  auto t0 = std::chrono::steady_clock::now();
  {
    Loader l(slow, opts(10, 3));
    l.start_epoch(0);
    Batch b;
    REQUIRE(l.next(b));
  }  // destroyed with workers busy and batches queued
  { Loader l(slow, opts(10, 2)); }  // never started
  {
    Loader l(slow, opts(10, 2));
    l.start_epoch(0);
  }  // started, never read
  {
    auto ds = counting(60);
    Loader l(ds, opts(10, 2));
    l.start_epoch(0);
    Batch b;
    REQUIRE(l.next(b));
    REQUIRE(l.next(b));
    auto restarted = all_indices(epoch(l, 1));  // abandons epoch 0
    Loader fresh(ds, opts(10, 2));
    CHECK(restarted == all_indices(epoch(fresh, 1)));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("loader: resuming inside an epoch gives the remaining batches unchanged") {
  auto ds = test::dataset_from("{type: synthetic, size: 40, image_size: 8}");
  LoaderOptions o = opts(6, 2);
  o.augment.shift = 0.25f;
  o.augment.flip_horizontal = true;
  Loader l(ds, o);
  auto full = epoch(l, 4);
  REQUIRE(full.size() == 7);
  l.start_epoch(4, 3);
  std::vector<Batch> rest;
  Batch b;
  while (l.next(b)) rest.push_back(std::move(b));
  REQUIRE(rest.size() == 4);
  CHECK(rest[0].index == 3);
  CHECK(all_pixels(rest) == all_pixels(std::vector<Batch>(std::make_move_iterator(full.begin() + 3),
                                                          std::make_move_iterator(full.end()))));
  l.start_epoch(4, 99);
  CHECK(!l.next(b));
}

TEST_CASE("loader: a crop sets the batch shape, evaluation centre-crops, default workers") {
  // 20 samples of 6x6x1, pixel (y, x) of sample i = 10 * y + x + i.
  std::vector<uint8_t> px;
  for (int i = 0; i < 20; ++i)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 6; ++x) px.push_back(uint8_t(10 * y + x + i));
  auto ds = std::make_shared<MemoryDataset>(Shape{6, 6, 1}, 1, std::move(px), std::vector<int32_t>(20, 0), "grid");
  LoaderOptions o = opts(8, 2);
  o.augment.crop.height = 4, o.augment.crop.width = 4, o.augment.crop.padding = 2;
  Loader train(ds, o);
  CHECK(train.sample_shape() == Shape{4, 4, 1});
  std::vector<Batch> bs = epoch(train, 0);
  REQUIRE(bs.size() == 3);
  CHECK(bs[0].images.shape() == Shape{8, 4, 4, 1});
  o.augment = o.augment.without_random();
  o.workers = 0;
  Loader val(ds, o);
  bs = epoch(val, 0);
  const int64_t i = bs[0].indices[0];
  const float* img = bs[0].images.f32();
  CHECK(img[0] == float(11 + i));  // the window starts at (1, 1): centre of 6 for 4
  CHECK(img[15] == float(44 + i));
  CHECK(default_workers(1) >= 1);
  CHECK(default_workers(1) <= 4);
  CHECK(default_workers(64) == 1);
}

// A label outside the classes is a DataError naming the sample, unless it is the ignore class
// (LoaderOptions::ignore_class, e.g. -1 or -100), which is counted out of Batch::global_scored.
// (Readers check their labels too; this set of floats does not, so the loader's check is what runs.)
namespace {
class LabelList final : public FloatDataset {
 public:
  explicit LabelList(std::vector<int32_t> labels) : labels_(std::move(labels)) {}
  int64_t size() const override { return int64_t(labels_.size()); }
  Shape sample_shape() const override { return Shape{2}; }
  int num_classes() const override { return 3; }
  std::string describe() const override { return "labels"; }
  int32_t get_f32(int64_t i, float* values) const override {
    values[0] = values[1] = float(i);
    return labels_[size_t(i)];
  }

 private:
  std::vector<int32_t> labels_;
};
}  // namespace

TEST_CASE("loader: a label outside the classes is refused unless it is the ignore class, which is not scored") {
  auto first_batch = [](std::vector<int32_t> labels, std::optional<int32_t> ignore) {
    LoaderOptions lo;
    lo.batch_size = 4, lo.shuffle = false, lo.workers = 0, lo.ignore_class = ignore;
    Loader l(std::make_shared<LabelList>(std::move(labels)), lo);
    l.start_epoch(0);
    Batch b;
    if (!l.next(b)) throw std::logic_error("no batch");
    return b;
  };
  CHECK_THROWS_WITH(first_batch({0, -1, 2, 1}, std::nullopt), Catch::Contains("sample 1 has label -1, outside 0..2"));
  CHECK_THROWS_WITH(first_batch({0, 1, 2, 3}, std::nullopt), Catch::Contains("sample 3 has label 3, outside 0..2"));
  CHECK_THROWS_WITH(first_batch({0, -1, 2, -100}, -1), Catch::Contains("sample 3 has label -100, outside 0..2"));
  const Batch b = first_batch({0, -1, 2, -1}, -1);
  CHECK(b.global_scored == 2);
  CHECK(scored_labels(b) == 2);
  CHECK(first_batch({0, 1, 2, 1}, std::nullopt).global_scored == 4);
}

// global_scored(k, epoch): batch k of any pass over the data (an accumulated optimizer step that
// spans two passes counts the next pass's labels before it starts), the labels that pass's
// batches will hold.
TEST_CASE("loader: the scored labels of another pass's batch are those that pass's batch holds") {
  std::vector<int32_t> labels;
  for (int i = 0; i < 23; ++i) labels.push_back(i % 4 == 1 || i % 7 == 3 ? -1 : i % 3);
  LoaderOptions lo;
  lo.batch_size = 4, lo.shuffle = true, lo.seed = 9, lo.workers = 0, lo.ignore_class = -1;
  Loader l(std::make_shared<LabelList>(labels), lo);
  l.start_epoch(0);
  std::vector<std::vector<int64_t>> other(3);  // passes 1 and 2, counted while pass 0 is started
  for (int64_t e = 1; e <= 2; ++e)
    for (int64_t k = 0; k < l.batches_per_epoch(); ++k) other[size_t(e)].push_back(l.global_scored(k, e));
  bool differ = false;
  for (int64_t e = 0; e <= 2; ++e) {
    l.start_epoch(e);
    Batch b;
    for (int64_t k = 0; l.next(b); ++k) {
      int64_t held = 0;
      for (int64_t i = 0; i < b.labels.numel(); ++i) held += b.labels.i32()[i] != -1;
      CHECK(b.global_scored == held);
      CHECK(l.global_scored(k, e) == held);
      CHECK(l.global_scored(k) == held);
      if (e > 0) CHECK(other[size_t(e)][size_t(k)] == held);
      if (e > 0 && other[size_t(e)][size_t(k)] != l.global_scored(k, 0)) differ = true;
    }
  }
  CHECK(differ);  // the passes' shuffles put the pads in other batches (else the check proves little)
}
