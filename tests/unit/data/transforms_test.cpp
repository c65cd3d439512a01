// Tests of the augment section parser, normalisation statistics and the per-sample transform.
#include <catch2/catch.hpp>

#include <set>

#include "core/data/memory_dataset.h"
#include "core/data/transforms.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::error_of;

namespace {

Augment parse(const std::string& yaml) {
  auto doc = cfg::parse_document("augment: " + yaml, "aug.yaml");
  return parse_augment(cfg::root(doc).child("augment"));
}

// A 3x4x1 image holding 0..11 row by row.
std::vector<uint8_t> tiny() {
  std::vector<uint8_t> v(12);
  for (int i = 0; i < 12; ++i) v[size_t(i)] = uint8_t(i);
  return v;
}

std::vector<float> run(const SampleTransform& t, const std::vector<uint8_t>& src, RandomParams p) {
  std::vector<float> out(src.size());
  t.apply(src.data(), out.data(), p);
  return out;
}

std::shared_ptr<MemoryDataset> random_dataset(int n, Shape shape, uint64_t seed) {
  std::vector<uint8_t> px(size_t(n * shape.numel()));
  Rng rng(seed);
  for (auto& v : px) v = uint8_t(rng.uniform_int(0, 255));
  return std::make_shared<MemoryDataset>(shape, 1, std::move(px), std::vector<int32_t>(size_t(n), 0), "random");
}

}  // namespace

TEST_CASE("augment: parsing the section") {
  Augment a = parse("{shift: 0.1, flip: horizontal, mean: per_pixel, scale: 1/255}");
  CHECK(a.shift == Approx(0.1f));
  CHECK(a.flip_horizontal);
  CHECK(!a.flip_vertical);
  CHECK(a.mean == Augment::Mean::PerPixel);
  CHECK(a.scale == Approx(1.0f / 255));
  CHECK(a.random());
  CHECK(a.needs_stats());
  CHECK(!a.without_random().random());
  CHECK(a.without_random().mean == Augment::Mean::PerPixel);
  Augment b = parse("{flip: both, mean: 127.5, scale: 0.0078431372}");
  CHECK((b.flip_horizontal && b.flip_vertical));
  CHECK(b.mean == Augment::Mean::Constant);
  CHECK(b.mean_value == 127.5f);
  CHECK(parse("{mean: per_channel}").mean == Augment::Mean::PerChannel);
  Augment none = parse_augment(cfg::Node());
  CHECK(!none.random());
  CHECK(none.mean == Augment::Mean::None);
  CHECK(none.scale == 1.0f);

  std::string e = error_of<cfg::ConfigError>([] { parse("{flip: horizontel}"); });
  CHECK(e.find("aug.yaml:1:") == 0);
  CHECK(e.find("did you mean 'horizontal'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { parse("{mean: per_pixle}"); });
  CHECK(e.find("did you mean 'per_pixel'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { parse("{shfit: 0.1}"); });
  CHECK(e.find("did you mean 'shift'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { parse("{scale: 1/0}"); });
  CHECK(e.find("fraction") != std::string::npos);
  CHECK_THROWS_AS(parse("{shift: 1.5}"), cfg::ConfigError);
}

TEST_CASE("augment: flips and shifts move the right pixels") {
  Augment a;
  SampleTransform t(a, Shape{3, 4, 1}, nullptr);
  auto src = tiny();
  using V = std::vector<float>;
  CHECK(run(t, src, {}) == V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(run(t, src, {0, 0, true, false}) == V{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  CHECK(run(t, src, {0, 0, false, true}) == V{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3});
  // Content moves right by 1; the uncovered column repeats the nearest edge (fill_mode nearest).
  CHECK(run(t, src, {0, 1, false, false}) == V{0, 0, 1, 2, 4, 4, 5, 6, 8, 8, 9, 10});
  // Content moves up by 1.
  CHECK(run(t, src, {-1, 0, false, false}) == V{4, 5, 6, 7, 8, 9, 10, 11, 8, 9, 10, 11});
  // Left by 2 and flipped: the mirror image, then shifted.
  CHECK(run(t, src, {0, -2, true, false}) == V{1, 0, 0, 0, 5, 4, 4, 4, 9, 8, 8, 8});
}

TEST_CASE("augment: random draws stay in range and cover it") {
  Augment a;
  a.shift = 0.25f;  // 8x8: up to 2 pixels each way
  a.flip_horizontal = true;
  SampleTransform t(a, Shape{8, 8, 3}, nullptr);
  std::set<int> dxs, dys;
  int flips = 0;
  for (uint64_t i = 0; i < 400; ++i) {
    Rng rng{7, i};
    RandomParams p = t.draw(rng);
    dxs.insert(p.dx), dys.insert(p.dy);
    flips += p.flip_h;
    CHECK(!p.flip_v);
  }
  CHECK(dxs == std::set<int>{-2, -1, 0, 1, 2});
  CHECK(dys == std::set<int>{-2, -1, 0, 1, 2});
  CHECK((flips > 150 && flips < 250));
}

TEST_CASE("augment: per-pixel and per-channel statistics") {
  auto ds = random_dataset(37, Shape{3, 2, 2}, 1);
  NormStats pp = compute_stats(*ds, Augment::Mean::PerPixel, 3);
  REQUIRE(pp.mean.size() == 12);
  std::vector<uint8_t> px(12);
  std::vector<double> ref(12), sum(2), sq(2);
  for (int64_t i = 0; i < 37; ++i) {
    ds->get(i, px.data());
    for (size_t e = 0; e < 12; ++e) ref[e] += px[e] / 37.0, sum[e % 2] += px[e], sq[e % 2] += double(px[e]) * px[e];
  }
  for (size_t e = 0; e < 12; ++e) CHECK(pp.mean[e] == Approx(ref[e]).epsilon(1e-6));
  NormStats one = compute_stats(*ds, Augment::Mean::PerPixel, 1);
  CHECK(one.mean == pp.mean);  // exact whatever the thread count

  NormStats pc = compute_stats(*ds, Augment::Mean::PerChannel, 2);
  REQUIRE(pc.mean.size() == 2);
  for (size_t c = 0; c < 2; ++c) {
    double m = sum[c] / (37 * 6), sd = std::sqrt(sq[c] / (37 * 6) - m * m);
    CHECK(pc.mean[c] == Approx(m).epsilon(1e-6));
    CHECK(pc.stddev[c] == Approx(sd).epsilon(1e-5));
  }
  CHECK(compute_stats(*ds, Augment::Mean::None).mean.empty());
}

TEST_CASE("augment: normalisation applies mean, std and scale") {
  auto ds = random_dataset(5, Shape{3, 4, 1}, 2);
  auto src = tiny();
  Augment a;
  a.mean = Augment::Mean::PerPixel;
  a.scale = 0.5f;
  CHECK_THROWS_AS(SampleTransform(a, Shape{3, 4, 1}, nullptr), std::invalid_argument);
  auto pp = std::make_shared<NormStats>(compute_stats(*ds, Augment::Mean::PerPixel));
  CHECK_THROWS_AS(SampleTransform(a, Shape{4, 3, 1}, pp), DataError);
  SampleTransform t(a, Shape{3, 4, 1}, pp);
  // Flipped: the mean is subtracted at the destination position (after augmentation, as Keras).
  auto out = run(t, src, {0, 0, true, false});
  CHECK(out[0] == Approx((3 - pp->mean[0]) * 0.5f));
  CHECK(out[5] == Approx((6 - pp->mean[5]) * 0.5f));

  a.mean = Augment::Mean::PerChannel;
  auto pc = std::make_shared<NormStats>(compute_stats(*ds, Augment::Mean::PerChannel));
  SampleTransform tc(a, Shape{3, 4, 1}, pc);
  CHECK(run(tc, src, {})[7] == Approx((7 - pc->mean[0]) / pc->stddev[0] * 0.5f));

  Augment k;
  k.mean = Augment::Mean::Constant;
  k.mean_value = 127.5f;
  k.scale = 1 / 127.5f;
  std::vector<uint8_t> ends = {0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255};
  auto o = run(SampleTransform(k, Shape{3, 4, 1}, nullptr), ends, {});
  CHECK(o[0] == Approx(-1));
  CHECK(o[1] == Approx(1));
}
