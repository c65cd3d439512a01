// Tests of the dataset registry, make_dataset's common keys, SubsetDataset and split_dataset.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/data/memory_dataset.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;

TEST_CASE("dataset: every reader is registered") {
  auto types = dataset_types();
  for (const char* t : {"synthetic", "image_folder", "cifar10_bin", "mnist_idx"})
    CHECK(std::find(types.begin(), types.end(), t) != types.end());
  CHECK_THROWS_AS(register_dataset("synthetic", nullptr), std::logic_error);
}

TEST_CASE("dataset: type errors name the place and suggest") {
  std::string e = error_of<cfg::ConfigError>([] { dataset_from("{type: synthetc}"); });
  CHECK(e.find("test.yaml:1:") == 0);
  CHECK(e.find("did you mean 'synthetic'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { dataset_from("{size: 3}"); });
  CHECK(e.find("missing required key 'type'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { dataset_from("[1, 2]"); });
  CHECK(e.find("mapping") != std::string::npos);
}

TEST_CASE("dataset: limit picks a fixed, ordered, balanced subset") {
  auto full = dataset_from("{type: synthetic, size: 1000, image_size: 4}");
  auto a = dataset_from("{type: synthetic, size: 1000, image_size: 4, limit: 200}");
  auto b = dataset_from("{type: synthetic, size: 1000, image_size: 4, limit: 200}");
  REQUIRE(a->size() == 200);
  CHECK(a->describe().find("limit: 200") != std::string::npos);
  std::vector<uint8_t> pa(48), pb(48);
  std::vector<int> count(10);
  for (int64_t i = 0; i < 200; ++i) {
    int32_t la = a->get(i, pa.data());
    CHECK(b->get(i, pb.data()) == la);
    CHECK(pa == pb);
    ++count[size_t(la)];
  }
  for (int c : count) CHECK((c >= 8 && c <= 35));
  CHECK(dataset_from("{type: synthetic, size: 10, limit: 50}")->size() == 10);
  CHECK_THROWS_AS(dataset_from("{type: synthetic, limit: 0}"), cfg::ConfigError);
}

TEST_CASE("dataset: split_dataset takes the last fraction for validation, as Keras") {
  std::vector<uint8_t> px(10);
  for (int i = 0; i < 10; ++i) px[size_t(i)] = uint8_t(i);
  std::vector<int32_t> labels = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  auto ds = std::make_shared<MemoryDataset>(Shape{1, 1, 1}, 2, px, labels, "ten");
  auto [train, val] = split_dataset(ds, 0.25);
  REQUIRE(train->size() == 7);  // floor(10 * 0.75)
  REQUIRE(val->size() == 3);
  uint8_t v = 0;
  for (int64_t i = 0; i < 7; ++i) CHECK((train->get(i, &v), v) == i);
  for (int64_t i = 0; i < 3; ++i) CHECK((val->get(i, &v), v) == 7 + i);
  CHECK(val->num_classes() == 2);
  CHECK(val->describe().find("ten (validation_split 0.25: validation part: 3 of 10") == 0);
  CHECK_THROWS_AS(split_dataset(ds, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(split_dataset(ds, 1.0), std::invalid_argument);
  auto one = std::make_shared<MemoryDataset>(Shape{1, 1, 1}, 1, std::vector<uint8_t>{5}, std::vector<int32_t>{0}, "one");
  CHECK_THROWS_AS(split_dataset(one, 0.5), DataError);
}

// A set grouped by class (an image folder's listing): the last fraction would be the last
// classes alone, so it is shuffled with the seed first (Keras's image_dataset_from_directory),
// int(f * n) samples validation, each part in dataset order, every sample in exactly one part.
TEST_CASE("dataset: split_dataset of a set grouped by class shuffles first, so both parts hold every class") {
  const int n = 40;
  std::vector<uint8_t> px(n);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) px[size_t(i)] = uint8_t(i), labels[size_t(i)] = i * 4 / n;  // 4 classes of 10, in order
  auto ds = std::make_shared<MemoryDataset>(Shape{1, 1, 1}, 4, px, labels, "folders");
  ds->set_grouped_by_class(true);
  auto [train, val] = split_dataset(ds, 0.25, 7);
  REQUIRE(val->size() == 10);  // int(0.25 * 40)
  REQUIRE(train->size() == 30);
  CHECK(val->describe().find("folders (validation_split 0.25 (shuffled, seed 7): validation part: 10 of 40") == 0);
  std::vector<int> seen(n, 0), val_classes(4, 0), train_classes(4, 0);
  uint8_t v = 0, last = 0;
  for (int64_t i = 0; i < val->size(); ++i) {
    ++val_classes[size_t(val->get(i, &v))];
    ++seen[v];
    if (i > 0) CHECK(v > last);  // dataset order
    last = v;
  }
  for (int64_t i = 0; i < train->size(); ++i) ++train_classes[size_t(train->get(i, &v))], ++seen[v];
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  for (int c = 0; c < 4; ++c) {
    CHECK(val_classes[size_t(c)] >= 1);  // unshuffled, the last 10 would all be class 3
    CHECK(train_classes[size_t(c)] >= 5);
  }
  // The same seed, the same parts; another seed, others. A limit keeps the grouping.
  auto again = split_dataset(ds, 0.25, 7).second;
  auto other = split_dataset(ds, 0.25, 8).second;
  bool same = true, differs = false;
  for (int64_t i = 0; i < 10; ++i) {
    uint8_t a = 0, b = 0, c = 0;
    val->get(i, &a), again->get(i, &b), other->get(i, &c);
    same = same && a == b;
    differs = differs || a != c;
  }
  CHECK(same);
  CHECK(differs);
  CHECK(SubsetDataset(ds, {0, 1, 2}, "limit").grouped_by_class());
}

TEST_CASE("dataset: SubsetDataset and MemoryDataset check their inputs") {
  auto ds = std::make_shared<MemoryDataset>(Shape{1, 1, 1}, 2, std::vector<uint8_t>{1, 2}, std::vector<int32_t>{0, 1}, "two");
  CHECK_THROWS_AS(SubsetDataset(ds, {2}, "bad"), std::out_of_range);
  SubsetDataset s(ds, {1, 1, 0}, "pick");
  uint8_t v = 0;
  CHECK(s.get(0, &v) == 1);
  CHECK(v == 2);
  CHECK(s.class_names() == std::vector<std::string>{"0", "1"});
  CHECK_THROWS_AS(MemoryDataset(Shape{1, 1, 1}, 2, {1, 2}, {0, 2}, "bad label"), DataError);
  CHECK_THROWS_AS(MemoryDataset(Shape{1, 1, 1}, 2, {1, 2, 3}, {0, 1}, "bad size"), std::invalid_argument);
}
