// Tests of image_folder with a file list (`files:`): labels by name or index, classes, errors.
#include <catch2/catch.hpp>

#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;
using trainer::test::write_jpeg;

namespace {

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// Three 4x4 JPEGs of grey levels 30, 130, 230; one of them in a folder with a space.
void make_images(const TempDir& d) {
  write_jpeg(d / "root/img/a.jpg", std::vector<uint8_t>(48, 30), 4, 4, 3);
  write_jpeg(d / "root/img/b.jpg", std::vector<uint8_t>(48, 130), 4, 4, 3);
  write_jpeg(d / "root/my pics/c.jpg", std::vector<uint8_t>(48, 230), 4, 4, 3);
}

int grey(const Dataset& ds, int64_t i, int32_t& label) {
  std::vector<uint8_t> px(48);
  label = ds.get(i, px.data());
  return px[0];
}

}  // namespace

TEST_CASE("image list: class names, list order, paths with spaces, comments") {
  TempDir d;
  make_images(d);
  write_text(d / "root/list.txt", "# path label\nimg/b.jpg dog\n\n  my pics/c.jpg\tcat  \nimg/a.jpg dog\n");
  auto ds = dataset_from("{type: image_folder, path: root, files: list.txt}", d.path());
  REQUIRE(ds->size() == 3);
  CHECK(ds->class_names() == std::vector<std::string>{"cat", "dog"});  // sorted distinct names
  int32_t label = -1;
  CHECK(std::abs(grey(*ds, 0, label) - 130) <= 3);  // the list's order
  CHECK(label == 1);
  CHECK(std::abs(grey(*ds, 1, label) - 230) <= 3);
  CHECK(label == 0);
  CHECK(std::abs(grey(*ds, 2, label) - 30) <= 3);
  CHECK(label == 1);

  // classes: fixes names and order; limit_per_class counts in list order; cache off reads the same.
  auto fixed = dataset_from("{type: image_folder, path: root, files: list.txt, classes: [dog, cat, bird], "
                            "limit_per_class: 1, cache: false}", d.path());
  REQUIRE(fixed->size() == 2);
  CHECK(fixed->num_classes() == 3);
  CHECK(std::abs(grey(*fixed, 0, label) - 130) <= 3);
  CHECK(label == 0);
  CHECK(std::abs(grey(*fixed, 1, label) - 230) <= 3);
  CHECK(label == 1);
}

TEST_CASE("image list: class indices, with and without classes:") {
  TempDir d;
  make_images(d);
  write_text(d / "root/idx.txt", "img/a.jpg 2\nimg/b.jpg 0\n" + (d / "root/my pics/c.jpg") + " 2\n");
  auto ds = dataset_from("{type: image_folder, path: root, files: idx.txt}", d.path());
  REQUIRE(ds->size() == 3);
  CHECK(ds->class_names() == std::vector<std::string>{"0", "1", "2"});  // 0..max index
  int32_t label = -1;
  grey(*ds, 2, label);  // an absolute path
  CHECK(label == 2);
  auto named = dataset_from("{type: image_folder, path: root, files: idx.txt, classes: [x, y, z]}", d.path());
  CHECK(named->class_names() == std::vector<std::string>{"x", "y", "z"});
  grey(*named, 0, label);
  CHECK(label == 2);
}

TEST_CASE("image list: errors name the list file and line") {
  TempDir d;
  make_images(d);
  auto err = [&](const std::string& text, const std::string& extra = "") {
    write_text(d / "root/l.txt", text);
    return error_of<DataError>([&] { dataset_from("{type: image_folder, path: root, files: l.txt" + extra + "}", d.path()); });
  };
  const std::string l = d / "root/l.txt";
  CHECK(err("img/a.jpg cat\nimg/b.jpg 1\n") ==
        l + ": mixes class indices and class names; give the dataset's classes: [...] to say which name each index is");
  CHECK(err("img/a.jpg cat\nimg/b.jpg dgo\n", ", classes: [cat, dog]") == l + ":2: unknown class 'dgo' (did you mean 'dog'?)");
  CHECK(err("img/a.jpg 0\nimg/b.jpg 2\n", ", classes: [cat, dog]") ==
        l + ":2: class index 2 is not below the number of classes (2)");
  CHECK(err("\nimg/a.jpg\n") == l + ":2: expected '<relative/path> <label>', got 'img/a.jpg'");
  CHECK(err("# nothing\n\n") == l + ": no entries (expected lines '<relative/path> <label>')");
  CHECK(err("img/a.jpg 0\nimg/gone.jpg 0\n") == (d / "root/img/gone.jpg") + ": cannot open: No such file or directory");
  CHECK(err("img/a.jpg 0\nimg/gone.jpg 0\n", ", image_size: 4, cache: false") == (d / "root/img/gone.jpg") + ": cannot open: No such file or directory");
  std::string e = error_of<DataError>([&] { dataset_from("{type: image_folder, path: root, files: none.txt}", d.path()); });
  CHECK(e.find((d / "root/none.txt") + ": cannot open") == 0);
  e = error_of<cfg::ConfigError>([&] { dataset_from("{type: image_folder, path: root, classes: [a]}", d.path()); });
  CHECK(e.find("'classes' goes with 'files'") != std::string::npos);
}
