// MobileNetV2 (tf.keras, alpha 1.0, 224x224, 2 classes): the summary's counts and a few steps.
#include <catch2/catch.hpp>

#include "cli.h"

TEST_CASE("e2e summary: MobileNetV2 matches tf.keras' parameter counts and shapes") {
  auto r = e2e::trainer("summary '" TRAINER_SOURCE_DIR "/configs/mobilenetv2_cats_vs_dogs.yaml'");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Total params: 2,260,546"));
  CHECK_THAT(r.out, Catch::Contains("Trainable params: 2,226,434"));
  CHECK_THAT(r.out, Catch::Contains("Non-trainable params: 34,112"));
  CHECK_THAT(r.out, Catch::Contains("(None, 112, 112, 32)"));   // Conv1
  CHECK_THAT(r.out, Catch::Contains("(None, 113, 113, 96)"));   // block_1 asymmetric pad
  CHECK_THAT(r.out, Catch::Contains("(None, 7, 7, 1280)"));     // Conv_1
}

TEST_CASE("e2e MobileNetV2: training steps run on 32x32 inputs (the same graph, small)") {
  // The full 224x224 recipe is too slow for CI on 2 cores; the same graph at 32x32 exercises
  // every layer (depthwise, asymmetric padding, residual adds) forward and backward.
  std::string dir = e2e::temp_dir("mnv2");
  auto r = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/mobilenetv2_cats_vs_dogs.yaml' --run-dir run"
                        " --set model.input=[32,32,3] --set 'data.train={type: synthetic, size: 128, classes: 2, seed: 1}'"
                        " --set 'data.val={type: synthetic, size: 64, classes: 2, seed: 2}' --set train.epochs=1"
                        " --set train.batch_size=16 --set data.augment.flip=none",
                        dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Epoch 1/1"));
}
