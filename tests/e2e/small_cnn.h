// The small BN-free CNN on synthetic 16x16 images that the CLI tests train in milliseconds a step, as a run's YAML: one builder for the tests' configs.
#pragma once
#include <string>

namespace e2e {

// conv 3x3 (8) → [batch norm] → ReLU → max pool 2 → [conv 3x3 (16) → ReLU] → global average →
// dense 4 → softmax, on 4 synthetic classes; without batch norm (the default), replica counts give
// the same gradients.
struct SmallCnn {
  std::string name;
  int seed = 3;
  bool conv2 = false;        // the second convolution and its ReLU
  bool batchnorm = false;    // a batch norm after the first convolution
  int train_size = 320;      // synthetic training samples (seed 1)
  bool val = false;          // 64 synthetic validation samples (seed 2)
  bool flip = false;         // augment with horizontal flips besides the per-channel mean
  bool binary = false;       // two classes, one sigmoid unit and binary_crossentropy (the train section's loss key)
  std::string train = "{epochs: 3, batch_size: 32}";
  std::string optimizer = "{type: adam, lr: 0.01}";
  std::string schedule;      // the schedule section's value; empty: none
  std::string extra;         // further top-level lines (checkpoint:, devices:), each ending in a line break

  std::string yaml() const {
    std::string y = "name: " + name + "\nseed: " + std::to_string(seed) +
                    "\nmodel:\n  input: [16, 16, 3]\n  layers:\n"
                    "    - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: same}\n";
    if (batchnorm) y += "    - {name: bn1, type: batchnorm}\n";
    y += "    - {name: relu1, type: relu}\n"
         "    - {name: pool, type: max_pool2d, pool: 2}\n";
    if (conv2)
      y += "    - {name: conv2, type: conv2d, filters: 16, kernel: 3, padding: same}\n"
           "    - {name: relu2, type: relu}\n";
    const std::string classes = binary ? "2" : "4";
    y += "    - {name: gap, type: global_avg_pool2d}\n"
         "    - {name: dense, type: dense, units: " + std::string(binary ? "1" : "4") + "}\n" +
         (binary ? "    - {name: sigmoid, type: sigmoid}\n" : "    - {name: softmax, type: softmax}\n") +
         "data:\n  train: {type: synthetic, size: " + std::to_string(train_size) +
         ", image_size: 16, classes: " + classes + ", seed: 1}\n";
    if (val) y += "  val: {type: synthetic, size: 64, image_size: 16, classes: " + classes + ", seed: 2}\n";
    y += std::string("  augment: {") + (flip ? "flip: horizontal, " : "") + "mean: per_channel}\n";
    y += "train: " + train + "\noptimizer: " + optimizer + "\n";
    if (!schedule.empty()) y += "schedule: " + schedule + "\n";
    return y + extra;
  }
};

}  // namespace e2e
