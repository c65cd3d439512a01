// Tests of the augment geometry on tiny images: Keras fill modes, torchvision random/centre crops.
#include <catch2/catch.hpp>

#include <set>

#include "core/data/transforms.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::error_of;
using V = std::vector<float>;

namespace {

Augment parse(const std::string& yaml) {
  auto doc = cfg::parse_document("augment: " + yaml, "aug.yaml");
  return parse_augment(cfg::root(doc).child("augment"));
}

std::vector<uint8_t> iota(int n) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = uint8_t(i);
  return v;
}

V run(const Augment& a, const Shape& in, const std::vector<uint8_t>& src, RandomParams p) {
  SampleTransform t(a, in, nullptr);
  V out(size_t(t.output_shape().numel()));
  t.apply(src.data(), out.data(), p);
  return out;
}

RandomParams shift(int dy, int dx) {
  RandomParams p;
  p.dy = dy, p.dx = dx;
  return p;
}

RandomParams crop_at(int top, int left, bool flip_h = false) {
  RandomParams p;
  p.crop_top = top, p.crop_left = left, p.flip_h = flip_h;
  return p;
}

}  // namespace

TEST_CASE("augment: shift fill modes as Keras (nearest, reflect, wrap, constant)") {
  const Shape row{1, 4, 1};  // "abcd" = 0 1 2 3
  const auto src = iota(4);
  Augment a = parse("{shift: 0.5}");
  CHECK(run(a, row, src, shift(0, 2)) == V{0, 0, 0, 1});  // aa|ab
  CHECK(run(a, row, src, shift(0, -3)) == V{3, 3, 3, 3});
  a = parse("{shift: 0.5, fill_mode: reflect}");  // dcba|abcd|dcba
  CHECK(run(a, row, src, shift(0, 2)) == V{1, 0, 0, 1});
  CHECK(run(a, row, src, shift(0, -3)) == V{3, 3, 2, 1});
  a = parse("{shift: 0.5, fill_mode: wrap}");  // abcd|abcd|abcd
  CHECK(run(a, row, src, shift(0, 2)) == V{2, 3, 0, 1});
  CHECK(run(a, row, src, shift(0, -3)) == V{3, 0, 1, 2});
  a = parse("{shift: 0.5, fill_mode: constant, fill_value: 200}");
  CHECK(run(a, row, src, shift(0, 2)) == V{200, 200, 0, 1});
  CHECK(run(a, row, src, shift(0, -3)) == V{3, 200, 200, 200});
  // Vertically the same; fill_value is a pixel value, normalised like the others.
  a = parse("{shift: 0.5, fill_mode: constant, fill_value: 100, mean: 50, scale: 1/2}");
  CHECK(run(a, Shape{3, 1, 1}, iota(3), shift(1, 0)) == V{25, -25, -24.5f});
  a = parse("{shift: 0.5, fill_mode: constant}");
  CHECK(a.fill_value == 0);
}

TEST_CASE("augment: random crop with padding as torchvision RandomCrop") {
  const Shape img{3, 4, 1};  // rows 0..3, 4..7, 8..11
  const auto src = iota(12);
  Augment a = parse("{crop: {size: [3, 4], padding: 1}}");
  CHECK(a.crop.enabled());
  CHECK(a.random());
  CHECK(a.output_shape(img) == img);
  // Window at (0, 0) of the 5x6 padded image: one row and one column of padding (zeros).
  CHECK(run(a, img, src, crop_at(0, 0)) == V{0, 0, 0, 0, 0, 0, 1, 2, 0, 4, 5, 6});
  CHECK(run(a, img, src, crop_at(2, 2)) == V{5, 6, 7, 0, 9, 10, 11, 0, 0, 0, 0, 0});
  CHECK(run(a, img, src, crop_at(1, 1)) == V(src.begin(), src.end()));
  a = parse("{crop: {size: [3, 4], padding: 1, fill: 99}}");
  CHECK(run(a, img, src, crop_at(0, 0)) == V{99, 99, 99, 99, 99, 0, 1, 2, 99, 4, 5, 6});
  a = parse("{crop: {size: [3, 4], padding: 1, padding_mode: edge}}");
  CHECK(run(a, img, src, crop_at(0, 0)) == V{0, 0, 1, 2, 0, 0, 1, 2, 4, 4, 5, 6});
  a = parse("{crop: {size: [3, 4], padding: 1, padding_mode: reflect}}");  // dcb|abcd|cba
  CHECK(run(a, img, src, crop_at(0, 0)) == V{5, 4, 5, 6, 1, 0, 1, 2, 5, 4, 5, 6});
  a = parse("{crop: {size: [3, 4], padding: 2, padding_mode: symmetric}}");  // ba|abcd|dc (edge repeated)
  CHECK(run(a, img, src, crop_at(0, 0)) == V{5, 4, 4, 5, 1, 0, 0, 1, 1, 0, 0, 1});
  // Crop then flip: the window is mirrored.
  a = parse("{crop: {size: [3, 4], padding: 1}, flip: horizontal}");
  CHECK(run(a, img, src, crop_at(0, 0, true)) == V{0, 0, 0, 0, 2, 1, 0, 0, 6, 5, 4, 0});
  // A smaller window and no padding: the output is the window's size.
  a = parse("{crop: {size: 2}}");
  CHECK(a.output_shape(img) == Shape{2, 2, 1});
  CHECK(run(a, img, src, crop_at(1, 2)) == V{6, 7, 10, 11});
  // ... mirrored within itself when flipped (not within the image: its columns 1-2, not 1-0).
  a = parse("{crop: {size: 2}, flip: horizontal}");
  CHECK(run(a, img, src, crop_at(1, 1, true)) == V{6, 5, 10, 9});
  CHECK(run(a, img, src, crop_at(0, 2, true)) == V{3, 2, 7, 6});
  // The shift applies last; its fill covers the crop's padding.
  a = parse("{crop: {size: [3, 4], padding: 1, fill: 7}, shift: 0.4, fill_mode: constant, fill_value: 9}");
  CHECK(run(a, img, src, [] { RandomParams p = crop_at(0, 0); p.dy = 1; return p; }()) ==
        V{9, 9, 9, 9, 7, 7, 7, 7, 7, 0, 1, 2});
}

TEST_CASE("augment: crop draws cover the range, evaluation centre-crops") {
  Augment a = parse("{crop: {size: [32, 32], padding: 4}}");
  SampleTransform t(a, Shape{32, 32, 3}, nullptr);
  std::set<int> tops, lefts;
  for (uint64_t i = 0; i < 2000; ++i) {
    Rng rng{3, i};
    RandomParams p = t.draw(rng);
    tops.insert(p.crop_top), lefts.insert(p.crop_left);
  }
  CHECK(tops.size() == 9);
  CHECK((*tops.begin() == 0 && *tops.rbegin() == 8));
  CHECK((*lefts.begin() == 0 && *lefts.rbegin() == 8));

  const Shape img{3, 4, 1};
  const auto src = iota(12);
  Augment e = parse("{crop: {size: 2, padding: 1}}").without_random();
  CHECK(!e.random());
  CHECK(run(e, img, src, {}) == V{1, 2, 5, 6});  // top round(0.5) = 0 (half to even), left 1; no padding
  e = parse("{crop: {size: [5, 4]}}").without_random();  // larger than the image: zeros around
  CHECK(run(e, img, src, {}) == V{0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 0, 0, 0});
  e = parse("{crop: {size: [1, 1]}}").without_random();
  CHECK(run(e, Shape{4, 6, 1}, iota(24), {}) == V{14});  // top round(1.5) = 2, left round(2.5) = 2
}

TEST_CASE("augment: crop, fill and preprocessing keys and their errors") {
  Augment a = parse("{crop: {size: 32, padding: 4, padding_mode: edge, fill: 3}, fill_mode: wrap}");
  CHECK(a.crop.height == 32);
  CHECK(a.crop.width == 32);
  CHECK(a.crop.padding == 4);
  CHECK(a.crop.padding_mode == Augment::Fill::Nearest);
  CHECK(a.crop.fill == 3);
  CHECK(a.fill_mode == Augment::Fill::Wrap);
  std::string e = error_of<cfg::ConfigError>([] { parse("{fill_mode: reflct}"); });
  CHECK(e.find("did you mean 'reflect'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { parse("{crop: {padding: 4}}"); });
  CHECK(e.find("missing required key 'size'") != std::string::npos);
  e = error_of<cfg::ConfigError>([] { parse("{crop: {size: 8, padding_mode: zero}}"); });
  CHECK(e.find("aug.yaml:1:") == 0);
  e = error_of<cfg::ConfigError>([] { parse("{crop: {size: 8, paddng: 4}}"); });
  CHECK(e.find("did you mean 'padding'") != std::string::npos);
  CHECK_THROWS_AS(parse("{fill_value: 300}"), cfg::ConfigError);

  // Too large for the padded image; per-pixel mean with a crop of another size.
  std::string d = error_of<DataError>([] { SampleTransform(parse("{crop: {size: 9, padding: 2}}"), Shape{4, 4, 1}, nullptr); });
  CHECK(d == "augment crop: size 9x9 is larger than the padded image 8x8 (4x4 padded by 2)");
  auto stats = std::make_shared<NormStats>();
  stats->kind = Augment::Mean::PerPixel, stats->shape = Shape{4, 4, 1}, stats->mean.assign(16, 0.f);
  d = error_of<DataError>([&] { SampleTransform(parse("{crop: {size: 2}, mean: per_pixel}"), Shape{4, 4, 1}, stats); });
  CHECK(d.find("mean: per_pixel needs the crop size to equal the image size (4x4), not 2x2") != std::string::npos);

  // MobileNetV2's preprocessing (x / 127.5 - 1) through the config keys.
  Augment m = parse("{mean: 127.5, scale: 1/127.5}");
  V out = run(m, Shape{1, 3, 1}, {0, 255, 51}, {});
  CHECK(out[0] == Approx(-1.0f));
  CHECK(out[1] == Approx(1.0f));
  CHECK(out[2] == Approx(51 / 127.5 - 1).margin(1e-6));
}
