// Tests of image_folder's skip_corrupt (one counted warning) and of the cache budget (cache: auto).
#include <catch2/catch.hpp>

#include "core/data/util.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::PngSpec;
using trainer::test::TempDir;
using trainer::test::write_bytes;
using trainer::test::write_jpeg;
using trainer::test::write_png;

namespace {

// Collects the data warnings issued while it lives.
struct WarningCapture {
  std::vector<std::string> lines;
  WarningCapture() {
    set_data_warning_handler([this](const std::string& l) { lines.push_back(l); });
  }
  ~WarningCapture() { set_data_warning_handler(nullptr); }
};

// Class a: 3 good (grey 10, 20, 30); class b: good 40, then a truncated JPEG, a text file named
// .jpg, an empty file and a truncated PNG; class c: one good (grey 90).
void make_set(const TempDir& d) {
  for (int i = 0; i < 3; ++i) write_jpeg(d / ("set/a/" + std::to_string(i) + ".jpg"), std::vector<uint8_t>(48, uint8_t(10 * (i + 1))), 4, 4, 3);
  write_jpeg(d / "set/b/0.jpg", std::vector<uint8_t>(48, 40), 4, 4, 3);
  std::vector<uint8_t> noise(48);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = uint8_t(i * 37);
  write_jpeg(d / "set/b/1.jpg", noise, 4, 4, 3);
  std::vector<uint8_t> jpg = data_util::read_file(d / "set/b/1.jpg");
  jpg.resize(jpg.size() - 40);
  write_bytes(d / "set/b/1.jpg", jpg);
  write_bytes(d / "set/b/2.jpg", {'<', 'h', 't', 'm', 'l', '>'});
  write_bytes(d / "set/b/3.jpg", {});
  PngSpec s;
  s.height = 4, s.width = 4, s.rows.assign(48, 7);
  std::vector<uint8_t> png = trainer::test::encode_png(s);
  png.resize(png.size() - 20);
  write_bytes(d / "set/b/4.png", png);
  write_jpeg(d / "set/c/0.jpg", std::vector<uint8_t>(48, 90), 4, 4, 3);
}

std::vector<std::pair<int32_t, int>> contents(const Dataset& ds) {
  std::vector<std::pair<int32_t, int>> out;
  std::vector<uint8_t> px(size_t(ds.sample_shape().numel()));
  for (int64_t i = 0; i < ds.size(); ++i) {
    int32_t label = ds.get(i, px.data());
    out.push_back({label, (px[0] + 5) / 10 * 10});
  }
  return out;
}

}  // namespace

TEST_CASE("skip_corrupt: bad files are left out with one counted warning, cached or not") {
  TempDir d;
  make_set(d);
  const std::vector<std::pair<int32_t, int>> want = {{0, 10}, {0, 20}, {0, 30}, {1, 40}, {2, 90}};
  for (const char* cache : {"true", "false"}) {
    CAPTURE(cache);
    WarningCapture w;
    auto ds = dataset_from(std::string("{type: image_folder, path: set, skip_corrupt: true, cache: ") + cache + "}", d.path());
    CHECK(contents(*ds) == want);
    CHECK(ds->num_classes() == 3);
    CHECK(ds->describe().find("5 images, 3 classes, 4x4x3, 4 corrupt skipped") != std::string::npos);
    REQUIRE(w.lines.size() == 1);
    CHECK(w.lines[0].find("image_folder set: skipped 4 corrupt files, first: " + (d / "set/b/1.jpg") +
                          ": cannot decode JPEG: ") == 0);
  }
  // With image_size (no size check) the same files are found.
  WarningCapture w;
  auto sized = dataset_from("{type: image_folder, path: set, skip_corrupt: true, image_size: 4, cache: false}", d.path());
  CHECK(contents(*sized) == want);
  CHECK(w.lines.size() == 1);

  // Without skip_corrupt the first bad file (in listing order) stops the open.
  std::string e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: set}", d.path()); });
  CHECK(e.find((d / "set/b/1.jpg") + ": cannot decode JPEG: ") == 0);
}

TEST_CASE("skip_corrupt: a bad first file, odd sizes, nothing decodable") {
  TempDir d;
  write_bytes(d / "set/a/0.jpg", {1, 2, 3});
  write_jpeg(d / "set/a/1.jpg", std::vector<uint8_t>(48, 50), 4, 4, 3);
  write_jpeg(d / "set/b/0.jpg", std::vector<uint8_t>(48, 60), 4, 4, 3);
  WarningCapture w;
  auto ds = dataset_from("{type: image_folder, path: set, skip_corrupt: true}", d.path());
  CHECK(ds->size() == 2);  // the size comes from the first readable file
  CHECK(ds->sample_shape() == Shape{4, 4, 3});
  REQUIRE(w.lines.size() == 1);
  CHECK(w.lines[0] == "image_folder set: skipped 1 corrupt file, first: " + (d / "set/a/0.jpg") +
                          ": not a JPEG or PNG file (first bytes 01 02 03)");

  // An image of another size is a configuration matter: never skipped.
  write_jpeg(d / "set/b/1.jpg", std::vector<uint8_t>(75, 60), 5, 5, 3);
  std::string e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: set, skip_corrupt: true}", d.path()); });
  CHECK(e.find((d / "set/b/1.jpg") + ": image is 5x5 (HxW)") == 0);

  TempDir bad;
  write_bytes(bad / "set/a/0.jpg", {});
  write_bytes(bad / "set/a/1.png", {0x89, 'P', 'N', 'G'});
  e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: set, skip_corrupt: true}", bad.path()); });
  CHECK(e == (bad / "set") + ": none of the 2 images could be decoded; first: " + (bad / "set/a/0.jpg") +
                 ": empty file (0 bytes), not an image");
  std::string c = error_of<cfg::ConfigError>([&] { dataset_from("{type: image_folder, path: set, skip_corupt: true}"); });
  CHECK(c.find("did you mean 'skip_corrupt'") != std::string::npos);
}

TEST_CASE("cache: auto caches within the budget and decodes per access beyond it") {
  TempDir d;
  for (int i = 0; i < 4; ++i) write_jpeg(d / ("set/a/" + std::to_string(i) + ".jpg"), std::vector<uint8_t>(300, uint8_t(50 * i)), 10, 10, 3);
  const uint64_t left = data_util::cache_budget_left();
  CHECK(data_util::cache_budget() > 0);
  {
    auto cached = dataset_from("{type: image_folder, path: set}", d.path());
    CHECK(cached->describe().find("(cached, 1.2 KiB)") != std::string::npos);
    CHECK(data_util::cache_budget_left() == left - 1200);
    data_util::set_cache_budget(1000);  // less than the 1200 decoded bytes
    auto lazy = dataset_from("{type: image_folder, path: set, cache: auto}", d.path());
    CHECK(lazy->describe().find("decoded per access: 1.2 KiB decoded exceeds the 0 B left of the cache budget") !=
          std::string::npos);
    CHECK(contents(*lazy).size() == 4);
    std::vector<uint8_t> a(300), b(300);
    for (int64_t i = 0; i < 4; ++i) {
      cached->get(i, a.data());
      lazy->get(i, b.data());
      CHECK(a == b);
    }
    auto forced = dataset_from("{type: image_folder, path: set, cache: true}", d.path());  // past the budget
    CHECK(forced->describe().find("(cached") != std::string::npos);
    auto off = dataset_from("{type: image_folder, path: set, cache: false}", d.path());
    CHECK(off->describe().find("(decoded per access: cache: false)") != std::string::npos);
    std::string e = error_of<cfg::ConfigError>([&] { dataset_from("{type: image_folder, path: set, cache: maybe}"); });
    CHECK(e.find("must be true, false or auto, not 'maybe'") != std::string::npos);
  }
  data_util::set_cache_budget(0);  // the default again
  CHECK(data_util::cache_budget_left() == left);  // every reservation returned
}

TEST_CASE("skip_corrupt: the context's default (data.skip_corrupt) applies unless the section says") {
  TempDir d;
  make_set(d);
  auto doc = cfg::parse_document("a: {type: image_folder, path: set}\nb: {type: image_folder, path: set, skip_corrupt: false}\n"
                                 "c: {type: synthetic, size: 4}\n", "t.yaml");
  DatasetContext ctx;
  ctx.base_dir = d.path();
  ctx.skip_corrupt = true;
  WarningCapture w;
  CHECK(make_dataset(cfg::root(doc).child("a"), ctx)->size() == 5);
  CHECK(w.lines.size() == 1);
  CHECK_THROWS_AS(make_dataset(cfg::root(doc).child("b"), ctx), DataError);
  CHECK(make_dataset(cfg::root(doc).child("c"), ctx)->size() == 4);  // readers without files ignore it
}
