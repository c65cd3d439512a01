// End-to-end training: the README's quickstart, a transformer on sequences, a real CIFAR-10 slice, summary, smoke, weight decay's exclusions.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "cli.h"
#include "core/io/safetensors.h"
#include "skip.h"

TEST_CASE("e2e summary: MiniGoogLeNet matches Keras' parameter counts and shapes") {
  auto r = e2e::trainer("summary '" TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml'");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Total params: 1,656,250"));
  CHECK_THAT(r.out, Catch::Contains("Trainable params: 1,652,826"));
  CHECK_THAT(r.out, Catch::Contains("Non-trainable params: 3,424"));
  CHECK_THAT(r.out, Catch::Contains("(None, 32, 32, 96)"));
  CHECK_THAT(r.out, Catch::Contains("(None, 15, 15, 160)"));
  CHECK_THAT(r.out, Catch::Contains("(None, 7, 7, 240)"));
  CHECK_THAT(r.out, Catch::Contains("(None, 7, 7, 336)"));
}

TEST_CASE("e2e smoke: configs/smoke.yaml trains and writes its run directory") {
  std::string dir = e2e::temp_dir("smoke");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --run-dir run --json", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Epoch 1/3") && Catch::Contains("Epoch 3/3"));
  CHECK(std::filesystem::exists(dir + "/run/config.yaml"));
  CHECK(std::filesystem::exists(dir + "/run/train.log"));
  auto m = e2e::last_metrics(dir + "/run");
  CHECK(m.count("val_accuracy"));
  CHECK(m["loss"] > 0);
  // Runs are never overwritten.
  auto again = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --run-dir run", dir);
  CHECK(again.code != 0);
}

TEST_CASE("e2e quickstart: the README's main job reaches >= 90% validation accuracy") {
  std::string dir = e2e::temp_dir("quickstart");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/quickstart.yaml' --run-dir run", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto m = e2e::last_metrics(dir + "/run");
  WARN("quickstart val_accuracy = " << m["val_accuracy"]);
  CHECK(m["val_accuracy"] >= 0.90);
}

TEST_CASE("e2e transformer: configs/transformer_sequences.yaml reaches >= 85% validation accuracy in its first epoch") {
  std::string dir = e2e::temp_dir("transformer");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/transformer_sequences.yaml' --run-dir run --set train.epochs=1",
                        dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto m = e2e::last_metrics(dir + "/run");
  WARN("transformer_sequences, 1 epoch: val_accuracy = " << m["val_accuracy"]);  // 16 classes: chance is 0.0625
  CHECK(m["val_accuracy"] >= 0.85);
}

TEST_CASE("e2e cifar10: a small CNN on a slice of the real CIFAR-10 images learns") {
  std::string data = e2e::shared_data_dir();
  if (data.empty()) TRAINER_SKIP(Data, "the CIFAR-10 tarballs are not in TRAINER_DATA or ../shared/data");
  std::string dir = e2e::temp_dir("cifar");
  // 500 training images per class (5,000) and 100 test images per class (1,000).
  std::string unpack = "tar -xzf '" + data + "/cifar10-jpg-train.tar.gz' -C '" + dir +
                       "' --wildcards 'cifar10-jpg/train/*/0[0-4]??.jpg' && tar -xzf '" + data +
                       "/cifar10-jpg-test.tar.gz' -C '" + dir + "' --wildcards 'cifar10-jpg/test/*/00??.jpg'";
  REQUIRE(std::system(unpack.c_str()) == 0);
  e2e::write_file(dir + "/cifar_slice.yaml", R"(
name: cifar_slice
seed: 3
model:
  input: [32, 32, 3]
  blocks:
    cbr:
      params: {filters: null, stride: 1}
      layers:
        - {name: conv, type: conv2d, filters: $filters, kernel: 3, strides: $stride, padding: same, use_bias: false}
        - {name: bn, type: batchnorm}
        - {name: relu, type: relu}
  layers:
    - {name: b1, type: cbr, filters: 32}
    - {name: b2, type: cbr, filters: 32, stride: 2}
    - {name: b3, type: cbr, filters: 64}
    - {name: b4, type: cbr, filters: 64, stride: 2}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 10}
    - {name: softmax, type: softmax}
data:
  train: {type: image_folder, path: cifar10-jpg/train}
  val: {type: image_folder, path: cifar10-jpg/test}
  augment: {flip: horizontal, mean: per_channel}
train: {epochs: 6, batch_size: 64}
optimizer: {type: adam, lr: 2.0e-3}
schedule: {type: cosine}
)");
  auto r = e2e::trainer("run cifar_slice.yaml --run-dir run", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto m = e2e::last_metrics(dir + "/run");
  WARN("CIFAR-10 slice (5,000 train / 1,000 test images, 468 steps): val_accuracy = " << m["val_accuracy"]);
  CHECK(m["val_accuracy"] >= 0.35);  // chance is 0.10
  std::filesystem::remove_all(dir);
}

TEST_CASE("e2e smoke on CUDA: configs/smoke.yaml trains on GPU 0") {
  if (e2e::skip_without_gpu()) return;
  std::string dir = e2e::temp_dir("smoke-cuda");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --gpus 0 --run-dir run", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto m = e2e::last_metrics(dir + "/run");
  CHECK(m["val_accuracy"] > 0.2);
}

// optimizer.exclude_from_weight_decay through a run, one process and two replicas: the excluded
// parameters (the biases here) train exactly as without decay, the others do not.
TEST_CASE("e2e optimizer: exclude_from_weight_decay trains the matching parameters as without decay, and the banner names it and a schedule that cannot move") {
  std::string dir = e2e::temp_dir("wd_exclude");
  e2e::write_file(dir + "/c.yaml", R"(name: wdx
seed: 3
model:
  input: [8, 8, 3]
  layers:
    - {name: conv, type: conv2d, filters: 4, kernel: 3, padding: same}
    - {name: relu, type: relu}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 3, seed: 1}
train: {epochs: 1, batch_size: 16, steps_per_epoch: 1}
optimizer: {type: adamw, lr: 0.01, weight_decay: 0.5, exclude_from_weight_decay: [bias]}
)");
  for (const std::string devices : {"", " --cpu 2 --set train.batch_size=8"}) {
    INFO("devices:" << devices);
    auto a = e2e::trainer("run c.yaml --run-dir a" + devices, dir);
    auto b = e2e::trainer("run c.yaml --run-dir b --set optimizer.weight_decay=0" + devices, dir);
    INFO(a.out << a.err << b.out << b.err);
    REQUIRE(a.code == 0);
    REQUIRE(b.code == 0);
    CHECK_THAT(a.out, Catch::Contains("Weight decay leaves out the parameters matching bias"));
    CHECK_THAT(a.out, !Catch::Contains("Note: schedule"));  // constant: nothing to say
    trainer::SafeTensorsReader ra(dir + "/a/checkpoints/epoch-0001.safetensors"), rb(dir + "/b/checkpoints/epoch-0001.safetensors");
    for (const char* p : {"conv/bias", "dense/bias"}) CHECK(ra.f32(p) == rb.f32(p));
    for (const char* p : {"conv/kernel", "dense/kernel"}) CHECK(ra.f32(p) != rb.f32(p));
    std::filesystem::remove_all(dir + "/a");
    std::filesystem::remove_all(dir + "/b");
  }
  // A per-epoch schedule over one epoch never leaves its first rate: the banner says so.
  auto c = e2e::trainer("run c.yaml --run-dir c --set 'schedule={type: cosine}'", dir);
  INFO(c.out << c.err);
  REQUIRE(c.code == 0);
  CHECK_THAT(c.out, Catch::Contains("Note: schedule cosine changes the rate between epochs and this run has one: the rate "
                                    "stays 0.01 (schedule.per_step: true moves it every step)"));
  auto d = e2e::trainer("run c.yaml --run-dir d --set 'schedule={type: cosine, per_step: true}'", dir);
  CHECK_THAT(d.out, !Catch::Contains("Note: schedule"));
}
