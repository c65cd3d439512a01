// Tests of float-sample sets: synthetic_sequences (shapes, determinism, balance, learnability) and the Loader's float path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/data/loader.h"
#include "core/data/transforms.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;

namespace {

std::vector<float> sample(const Dataset& ds, int64_t i, int32_t* label = nullptr) {
  std::vector<float> v(size_t(ds.sample_shape().numel()));
  const int32_t l = ds.get_f32(i, v.data());
  if (label) *label = l;
  return v;
}

// Mean squared difference of the two halves of a pair sample.
double pair_msd(const std::vector<float>& v) {
  const size_t n = v.size() / 2;
  double s = 0;
  for (size_t k = 0; k < n; ++k) s += double(v[k] - v[n + k]) * double(v[k] - v[n + k]);
  return s / double(n);
}

}  // namespace

TEST_CASE("synthetic_sequences: defaults, shapes and input shapes") {
  auto ds = dataset_from("{type: synthetic_sequences}");
  CHECK(ds->float_samples());
  CHECK(ds->size() == 2048);
  CHECK(ds->num_classes() == 2);
  CHECK(ds->input_shapes() == std::vector<Shape>{Shape{140, 256}, Shape{140, 256}});
  CHECK(ds->sample_shape() == Shape{2 * 140 * 256});
  CHECK(ds->class_names() == std::vector<std::string>{"different", "same"});
  CHECK(ds->describe() == "synthetic_sequences: 2048 pairs of (140, 256) sequences from 8 sources, 2 classes "
                          "(seed 0, noise 0.5)");

  auto one = dataset_from("{type: synthetic_sequences, inputs: 1, size: 30, length: 20, features: 8, sources: 5}");
  CHECK(one->input_shapes() == std::vector<Shape>{Shape{20, 8}});
  CHECK(one->sample_shape() == Shape{20, 8});
  CHECK(one->num_classes() == 5);
  for (int64_t i = 0; i < 30; ++i) {
    int32_t label = -1;
    sample(*one, i, &label);
    CHECK(label == i % 5);
  }
}

TEST_CASE("synthetic_sequences: samples are a pure function of seed and index") {
  auto a = dataset_from("{type: synthetic_sequences, size: 100, length: 12, features: 6, seed: 3}");
  auto b = dataset_from("{type: synthetic_sequences, size: 100, length: 12, features: 6, seed: 3}");
  auto c = dataset_from("{type: synthetic_sequences, size: 100, length: 12, features: 6, seed: 4}");
  for (int64_t i : {0, 1, 17, 99}) {
    int32_t la = 0, lb = 0;
    const auto va = sample(*a, i, &la), vb = sample(*b, i, &lb);
    CHECK(va == vb);
    CHECK(la == lb);
    CHECK(sample(*a, i) == va);  // again: the same values
    CHECK(sample(*c, i) != va);
  }
  CHECK(sample(*a, 0) != sample(*a, 2));
  // source_seed: new samples of the same sources.
  auto v = dataset_from("{type: synthetic_sequences, size: 100, length: 12, features: 6, seed: 9, source_seed: 3}");
  CHECK(sample(*v, 5) != sample(*a, 5));
  CHECK(v->describe().find("source_seed 3") != std::string::npos);
}

TEST_CASE("synthetic_sequences: concurrent reads equal serial reads") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 64, length: 10, features: 4}");
  const size_t n = size_t(ds->sample_shape().numel());
  std::vector<float> serial(64 * n), parallel(64 * n);
  for (int64_t i = 0; i < 64; ++i) ds->get_f32(i, &serial[size_t(i) * n]);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < 64; i += 4) ds->get_f32(i, &parallel[size_t(i) * n]);
    });
  for (auto& th : threads) th.join();
  CHECK(serial == parallel);
}

TEST_CASE("synthetic_sequences: pair labels are balanced, pseudo-random and values stay in range") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 1000, length: 20, features: 8}");
  int ones = 0, ones_at_even = 0;
  double inside = 0, total = 0, max_abs = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    int32_t label = -1;
    const auto v = sample(*ds, i, &label);
    REQUIRE((label == 0 || label == 1));
    ones += label;
    ones_at_even += label && i % 2 == 0;
    for (float x : v) inside += std::abs(x) <= 2.f, max_abs = std::max(max_abs, double(std::abs(x)));
    total += double(v.size());
  }
  CHECK(ones == 500);  // exactly one of each pair of indices 2k, 2k+1
  CHECK(ones_at_even > 200);
  CHECK(ones_at_even < 300);
  CHECK(inside / total > 0.95);
  CHECK(max_abs < 5);
}

TEST_CASE("synthetic_sequences: same-source pairs are closer than different-source pairs (learnable)") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 1024, length: 20, features: 8, noise: 0.5}");
  std::vector<double> msd[2];
  for (int64_t i = 0; i < ds->size(); ++i) {
    int32_t label = 0;
    const auto v = sample(*ds, i, &label);
    msd[label].push_back(pair_msd(v));
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
  };
  const double same = mean(msd[1]), different = mean(msd[0]);
  INFO("mean squared difference: same source " << same << ", different sources " << different);
  CHECK(same < 0.6 * different);
  // A single threshold halfway between the means already separates most pairs.
  const double cut = 0.5 * (same + different);
  int right = 0;
  for (double x : msd[1]) right += x < cut;
  for (double x : msd[0]) right += x >= cut;
  INFO("threshold accuracy " << double(right) / 1024);
  CHECK(right > 0.85 * 1024);
}

TEST_CASE("synthetic_sequences: get() and bad keys fail clearly") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 4, length: 3, features: 2}");
  std::vector<uint8_t> px(64);
  const std::string e = error_of<DataError>([&] { ds->get(0, px.data()); });
  CHECK(e.find("synthetic_sequences") == 0);
  CHECK(e.find("float samples") != std::string::npos);
  CHECK(error_of<cfg::ConfigError>([] { dataset_from("{type: synthetic_sequences, lenght: 5}"); }).find("lenght") !=
        std::string::npos);
  CHECK_THROWS_AS(dataset_from("{type: synthetic_sequences, inputs: 3}"), cfg::ConfigError);
  CHECK_THROWS_AS(dataset_from("{type: synthetic_sequences, sources: 1}"), cfg::ConfigError);
  CHECK_THROWS_AS(dataset_from("{type: synthetic_sequences, noise: -1}"), cfg::ConfigError);
  CHECK_THROWS_AS(dataset_from("{type: synthetic_sequences, length: 0}"), cfg::ConfigError);
  // The image-only statistics refuse float sets instead of reading them as pixels.
  CHECK_THROWS_AS(compute_stats(*ds, Augment::Mean::PerChannel), std::invalid_argument);
  CHECK(compute_stats(*ds, Augment::Mean::None).mean.empty());
  // Images have no get_f32.
  auto img = dataset_from("{type: synthetic, size: 2, image_size: 4}");
  std::vector<float> f(48);
  CHECK_FALSE(img->float_samples());
  CHECK(img->input_shapes() == std::vector<Shape>{Shape{4, 4, 3}});
  CHECK_THROWS_AS(img->get_f32(0, f.data()), std::logic_error);
}

TEST_CASE("synthetic_sequences: limit and validation_split keep float samples") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 40, length: 5, features: 3, limit: 10}");
  CHECK(ds->size() == 10);
  CHECK(ds->float_samples());
  CHECK(ds->input_shapes().size() == 2);
  auto full = dataset_from("{type: synthetic_sequences, size: 40, length: 5, features: 3}");
  auto [train, val] = split_dataset(full, 0.25);
  REQUIRE(val->size() == 10);
  CHECK(val->float_samples());
  CHECK(val->input_shapes() == full->input_shapes());
  int32_t l1 = 0, l2 = 0;
  CHECK(sample(*val, 3, &l1) == sample(*full, 33, &l2));
  CHECK(l1 == l2);
  std::vector<uint8_t> px(100);
  CHECK_THROWS_AS(val->get(0, px.data()), DataError);
}

TEST_CASE("loader: a float set's batches are exactly get_f32's values, sharded over 2 replicas") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 37, length: 6, features: 3}");
  const size_t n = size_t(ds->sample_shape().numel());
  for (int workers : {0, 2}) {
    std::vector<int64_t> seen;
    std::vector<std::vector<Batch>> shards(2);
    for (int rank = 0; rank < 2; ++rank) {
      LoaderOptions o;
      o.batch_size = 4, o.workers = workers, o.seed = 5, o.rank = rank, o.replicas = 2;
      o.augment = o.augment.without_random();
      Loader l(ds, o);
      CHECK(l.sample_shape() == ds->sample_shape());
      l.start_epoch(1);
      Batch b;
      while (l.next(b)) {
        REQUIRE(b.images.shape() == Shape{b.size, int64_t(n)});
        for (int64_t j = 0; j < b.size; ++j) {
          int32_t label = -1;
          const auto v = sample(*ds, b.indices[size_t(j)], &label);
          CHECK(std::equal(v.begin(), v.end(), b.images.f32() + size_t(j) * n));
          CHECK(b.labels.i32()[j] == label);
        }
        seen.insert(seen.end(), b.indices.begin(), b.indices.end());
        shards[size_t(rank)].push_back(std::move(b));
      }
      CHECK(int64_t(shards[size_t(rank)].size()) == l.batches_per_epoch());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(37);
    for (int64_t i = 0; i < 37; ++i) all[size_t(i)] = i;
    CHECK(seen == all);  // disjoint shards covering the epoch
  }
  // One input: the batch keeps the [T, F] shape.
  auto one = dataset_from("{type: synthetic_sequences, inputs: 1, size: 9, length: 6, features: 3}");
  LoaderOptions o;
  o.batch_size = 4, o.workers = 1;
  Loader l(one, o);
  l.start_epoch(0);
  Batch b;
  REQUIRE(l.next(b));
  CHECK(b.images.shape() == Shape{4, 6, 3});
}

TEST_CASE("loader: augmentation of a float set is refused") {
  auto ds = dataset_from("{type: synthetic_sequences, size: 8, length: 4, features: 2}");
  auto refused = [&](auto edit) {
    LoaderOptions o;
    o.workers = 0;
    edit(o.augment);
    return error_of<std::invalid_argument>([&] { Loader l(ds, o); });
  };
  std::string e = refused([](Augment& a) { a.shift = 0.1f; });
  CHECK(e.find("float samples") != std::string::npos);
  CHECK(e.find("shift") != std::string::npos);
  CHECK(!refused([](Augment& a) { a.flip_horizontal = true; }).empty());
  CHECK(!refused([](Augment& a) { a.crop.height = a.crop.width = 2; }).empty());
  CHECK(!refused([](Augment& a) { a.crop.height = a.crop.width = 2, a.crop.center = true; }).empty());
  CHECK(!refused([](Augment& a) { a.mean = Augment::Mean::Constant, a.mean_value = 1; }).empty());
  CHECK(!refused([](Augment& a) { a.mean = Augment::Mean::PerChannel; }).empty());
  CHECK(refused([](Augment& a) { a.scale = 0.5f; }).find("scale 0.5") != std::string::npos);
  CHECK(refused([](Augment& a) { a = a.without_random(); }).empty());
}
