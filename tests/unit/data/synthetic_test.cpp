// Tests of the synthetic dataset: shape, determinism, thread safety, label balance, key errors.
#include <catch2/catch.hpp>

#include <array>
#include <thread>

#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;

TEST_CASE("synthetic: defaults and shape") {
  auto ds = dataset_from("{type: synthetic}");
  CHECK(ds->size() == 10000);
  CHECK(ds->sample_shape() == Shape{32, 32, 3});
  CHECK(ds->num_classes() == 10);
  CHECK(ds->class_names().at(0) == "circle");
  CHECK(ds->describe().find("synthetic") == 0);
  auto g = dataset_from("{type: synthetic, size: 7, image_size: [24, 40], channels: 1, classes: 4}");
  CHECK(g->size() == 7);
  CHECK(g->sample_shape() == Shape{24, 40, 1});
  CHECK(g->class_names().size() == 4);
}

TEST_CASE("synthetic: samples are a pure function of seed and index") {
  auto a = dataset_from("{type: synthetic, size: 200, seed: 3}");
  auto b = dataset_from("{type: synthetic, size: 200, seed: 3}");
  auto c = dataset_from("{type: synthetic, size: 200, seed: 4}");
  std::vector<uint8_t> pa(3072), pb(3072), pc(3072);
  int differ = 0;
  for (int64_t i : {0, 1, 17, 199}) {
    int32_t la = a->get(i, pa.data()), lb = b->get(i, pb.data()), lc = c->get(i, pc.data());
    CHECK(la == lb);
    CHECK(la == lc);  // labels are index % classes whatever the seed
    CHECK(pa == pb);
    differ += pa != pc;
    a->get(i, pb.data());  // again: same bytes
    CHECK(pa == pb);
  }
  CHECK(differ == 4);
  std::vector<uint8_t> p0(3072), p1(3072);
  a->get(0, p0.data());
  a->get(10, p1.data());  // same class, different sample
  CHECK(p0 != p1);
}

TEST_CASE("synthetic: concurrent reads equal serial reads") {
  auto ds = dataset_from("{type: synthetic, size: 64}");
  std::vector<uint8_t> serial(64 * 3072), parallel(64 * 3072);
  for (int64_t i = 0; i < 64; ++i) ds->get(i, &serial[size_t(i) * 3072]);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < 64; i += 4) ds->get(i, &parallel[size_t(i) * 3072]);
    });
  for (auto& t : threads) t.join();
  CHECK(serial == parallel);
}

TEST_CASE("synthetic: labels are balanced") {
  auto ds = dataset_from("{type: synthetic, size: 1000, image_size: 8, noise: 0}");
  std::array<int, 10> count{};
  std::vector<uint8_t> px(8 * 8 * 3);
  for (int64_t i = 0; i < ds->size(); ++i) {
    int32_t l = ds->get(i, px.data());
    REQUIRE(l == i % 10);
    ++count[size_t(l)];
  }
  for (int c : count) CHECK(c == 100);
  auto three = dataset_from("{type: synthetic, size: 9, classes: 3, image_size: 8}");
  for (int64_t i = 0; i < 9; ++i) CHECK(three->get(i, px.data()) == i % 3);
}

TEST_CASE("synthetic: the class is not given away by the mean colour") {
  // Nearest-centroid on each image's mean RGB should do little better than chance (10%).
  auto ds = dataset_from("{type: synthetic, size: 2000, seed: 1}");
  std::vector<uint8_t> px(3072);
  std::vector<std::array<double, 3>> feat(2000);
  std::array<std::array<double, 3>, 10> centroid{};
  for (int64_t i = 0; i < 2000; ++i) {
    ds->get(i, px.data());
    std::array<double, 3> m{};
    for (int p = 0; p < 1024; ++p)
      for (int c = 0; c < 3; ++c) m[size_t(c)] += px[size_t(p * 3 + c)] / 1024.0;
    feat[size_t(i)] = m;
    for (int c = 0; c < 3; ++c) centroid[size_t(i % 10)][size_t(c)] += m[size_t(c)] / 200.0;
  }
  int correct = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    int best = 0;
    double best_d = 1e30;
    for (int k = 0; k < 10; ++k) {
      double d = 0;
      for (int c = 0; c < 3; ++c) d += std::pow(feat[size_t(i)][size_t(c)] - centroid[size_t(k)][size_t(c)], 2);
      if (d < best_d) best_d = d, best = k;
    }
    correct += best == i % 10;
  }
  CHECK(correct < 2000 * 0.2);
}

TEST_CASE("synthetic: bad keys are config errors") {
  using trainer::test::error_of;
  std::string e = error_of<cfg::ConfigError>([] { dataset_from("{type: synthetic, sise: 5}"); });
  CHECK(e.find("unknown key 'sise'") != std::string::npos);
  CHECK(e.find("did you mean 'size'") != std::string::npos);
  CHECK(e.find("test.yaml:1:") == 0);
  e = error_of<cfg::ConfigError>([] { dataset_from("{type: synthetic, classes: 11}"); });
  CHECK(e.find("classes") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { dataset_from("{type: synthetic, image_size: [32, 32, 3]}"); });
  CHECK(e.find("image_size") != std::string::npos);
}
