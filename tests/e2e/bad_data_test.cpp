// Bad data through the CLI: each case reported with its file (and offset) and exit code 3.
// (skip_corrupt's counting is tested with the readers in tests/unit/data.)
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "cli.h"

namespace {

const char* kModel = R"(model:
  input: [8, 8, 3]
  layers:
    - {type: flatten}
    - {type: dense, units: 2}
    - {type: softmax}
train: {epochs: 1, batch_size: 2}
)";

void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("e2e bad data: a truncated CIFAR record file is a data error with its offset, exit 3") {
  std::string dir = e2e::temp_dir("badcifar");
  write_bytes(dir + "/cifar/data_batch_1.bin", std::string(3073 + 100, '\1'));
  for (int i = 2; i <= 5; ++i) write_bytes(dir + "/cifar/data_batch_" + std::to_string(i) + ".bin", std::string(3073, '\1'));
  e2e::write_file(dir + "/c.yaml", std::string(R"(model:
  input: [32, 32, 3]
  layers:
    - {type: flatten}
    - {type: dense, units: 10}
data: {train: {type: cifar10_bin, path: cifar}}
)"));
  auto r = e2e::trainer("run c.yaml", dir);
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Catch::Contains("data_batch_1.bin") && Catch::Contains("3173"));
}

TEST_CASE("e2e bad data: wrong IDX magic, exit 3") {
  std::string dir = e2e::temp_dir("badidx");
  write_bytes(dir + "/images.idx", std::string("\0\0\x08\x04", 4) + std::string(12, '\0'));
  write_bytes(dir + "/labels.idx", std::string("\0\0\x08\x01", 4) + std::string(4, '\0'));
  e2e::write_file(dir + "/m.yaml", std::string(R"(model:
  input: [28, 28, 1]
  layers:
    - {type: flatten}
    - {type: dense, units: 10}
data: {train: {type: mnist_idx, images: images.idx, labels: labels.idx}}
)"));
  auto r = e2e::trainer("run m.yaml", dir);
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Catch::Contains("images.idx") && Catch::Contains("magic"));
}

TEST_CASE("e2e bad data: an empty class folder, then corrupt JPEG/PNG files, exit 3") {
  std::string dir = e2e::temp_dir("badjpeg");
  std::filesystem::create_directories(dir + "/imgs/cat");
  std::filesystem::create_directories(dir + "/imgs/dog");
  e2e::write_file(dir + "/empty.yaml", std::string(kModel) + "data: {train: {type: image_folder, path: imgs}}\n");
  auto empty = e2e::trainer("run empty.yaml", dir);
  CHECK(empty.code == 3);
  CHECK_THAT(empty.err, Catch::Contains("imgs/cat"));

  write_bytes(dir + "/imgs/cat/bad.jpg", "\xff\xd8\xff\xe0 this is not a JPEG");
  write_bytes(dir + "/imgs/dog/bad.png", "\x89PNG\r\n\x1a\n truncated");
  auto corrupt = e2e::trainer("run empty.yaml", dir);
  CHECK(corrupt.code == 3);
  CHECK_THAT(corrupt.err, Catch::Contains("bad."));
}
