// train.loss, train.label_smoothing and train.ignore_class end to end: binary_crossentropy over a sigmoid fits a small set; the smoothed loss is the one reported; pad labels are not scored.
// binary_crossentropy with a one-unit sigmoid output fits a small two-class training set (circles
// vs squares: too hard for this tiny net to generalise in seconds, so the test asks for fitting,
// which needs the loss's gradient right), and eval scores it as a binary classifier.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "cli.h"

TEST_CASE("e2e loss: binary_crossentropy over a sigmoid output learns two synthetic classes") {
  std::string dir = e2e::temp_dir("bce");
  e2e::write_file(dir + "/c.yaml", R"(name: bce
seed: 5
model:
  input: [16, 16, 3]
  layers:
    - {name: conv, type: conv2d, filters: 8, kernel: 3, padding: same}
    - {name: relu, type: relu}
    - {name: pool, type: max_pool2d, pool: 2}
    - {name: conv2, type: conv2d, filters: 16, kernel: 3, padding: same}
    - {name: relu2, type: relu}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 1}
    - {name: sigmoid, type: sigmoid}
data:
  train: {type: synthetic, size: 64, image_size: 16, classes: 2, seed: 1}
  val: {type: synthetic, size: 128, image_size: 16, classes: 2, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 40, batch_size: 16, loss: binary_crossentropy}
optimizer: {type: adam, lr: 0.01}
)");
  auto r = e2e::trainer("run c.yaml --run-dir r --json", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("loss binary_crossentropy (fused with the output sigmoid)"));
  std::string csv = e2e::read_file(dir + "/r/metrics.csv");
  std::string last = csv.substr(csv.rfind('\n', csv.size() - 2) + 1);  // epoch,accuracy,loss,...
  double acc = std::stod(last.substr(last.find(',') + 1));
  WARN("binary_crossentropy: training accuracy after 40 epochs on 64 samples " << acc);
  CHECK(acc >= 0.8);
  auto e = e2e::trainer("eval r --split train --confusion", dir);
  INFO(e.out << e.err);
  REQUIRE(e.code == 0);
  CHECK_THAT(e.out, Catch::Contains("64 samples") && Catch::Contains("circle") && Catch::Contains("square"));
  auto bad = e2e::trainer("run c.yaml --set model.layers.6.units=3", dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("binary_crossentropy needs one output unit (shape 1), got 3"));
}

// Keras's Activation("sigmoid") is the sigmoid layer: as the output, the loss computes from its
// input either way (it was once taken as logits, the sigmoid applied twice). A probability output
// that is not the loss's own is refused at the layer, not taken as logits.
TEST_CASE("e2e loss: an activation-sigmoid output trains as a sigmoid layer output, and a loss over another probability output is refused") {
  std::string dir = e2e::temp_dir("bce_activation");
  auto config = [](const std::string& out, const std::string& loss) {
    return "name: bce\nseed: 5\nmodel:\n  input: [16, 16, 3]\n  layers:\n"
           "    - {name: conv, type: conv2d, filters: 8, kernel: 3, padding: same}\n"
           "    - {name: relu, type: relu}\n"
           "    - {name: gap, type: global_avg_pool2d}\n"
           "    - {name: dense, type: dense, units: 1}\n"
           "    - " + out + "\n"
           "data:\n  train: {type: synthetic, size: 64, image_size: 16, classes: 2, seed: 1}\n"
           "  augment: {mean: per_channel}\n"
           "train: {epochs: 3, batch_size: 16, loss: " + loss + "}\noptimizer: {type: sgd, lr: 0.5}\n";
  };
  e2e::write_file(dir + "/a.yaml", config("{name: out, type: sigmoid}", "binary_crossentropy"));
  e2e::write_file(dir + "/b.yaml", config("{name: out, type: activation, function: sigmoid}", "binary_crossentropy"));
  auto a = e2e::trainer("run a.yaml --run-dir a", dir);
  INFO(a.out << a.err);
  REQUIRE(a.code == 0);
  auto b = e2e::trainer("run b.yaml --run-dir b", dir);
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  CHECK_THAT(b.out, Catch::Contains("loss binary_crossentropy (fused with the output sigmoid)"));
  const std::string ma = e2e::read_file(dir + "/a/metrics.csv");
  CHECK(std::count(ma.begin(), ma.end(), '\n') == 4);  // the header and 3 epochs
  CHECK(ma == e2e::read_file(dir + "/b/metrics.csv"));
  // A sigmoid output under the softmax cross-entropy (a 2-unit dense, so the shape is not the issue).
  e2e::write_file(dir + "/c.yaml", config("{name: out, type: activation, function: sigmoid}", "sparse_categorical_crossentropy"));
  auto c = e2e::trainer("run c.yaml --set model.layers.3.units=2", dir);
  CHECK(c.code == 2);
  CHECK_THAT(c.err, Catch::Contains("c.yaml:10:7: the model's output 'out' is a sigmoid, but this loss takes logits or a "
                                    "softmax output"));
}

// train.label_smoothing: the reported loss is the smoothed loss. With ls = 1 every target is 1/K,
// and -Σ_j log(p_j)/K >= log K for any probabilities p (the arithmetic-geometric mean inequality):
// the unsmoothed loss could go below it, the smoothed one cannot. Values outside [0, 1] are refused.
TEST_CASE("e2e loss: label_smoothing smooths the targets and the reported loss, and is named in the plan") {
  std::string dir = e2e::temp_dir("smooth");
  e2e::write_file(dir + "/c.yaml", R"(name: smooth
seed: 5
model:
  input: [8, 8, 3]
  layers:
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 4}
    - {name: out, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 4, seed: 1}
  augment: {mean: per_channel}
train: {epochs: 10, batch_size: 16, label_smoothing: 1.0}
optimizer: {type: adam, lr: 0.01}
)");
  auto r = e2e::trainer("run c.yaml --run-dir r", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("loss sparse_categorical_crossentropy with label_smoothing 1"));
  CHECK_THAT(r.out, Catch::Contains("convention=keras"));
  const auto m = e2e::last_metrics(dir + "/r");
  WARN("label_smoothing 1: training loss " << m.at("loss") << ", log 4 = " << std::log(4.0));
  CHECK(m.at("loss") >= std::log(4.0) - 1e-6);
  auto plain = e2e::trainer("run c.yaml --run-dir p --set train.label_smoothing=0", dir);
  REQUIRE(plain.code == 0);
  const double plain_loss = e2e::last_metrics(dir + "/p").at("loss");
  WARN("label_smoothing 0: training loss " << plain_loss);
  CHECK(plain_loss < std::log(4.0));  // the unsmoothed loss does go below
  auto bad = e2e::trainer("run c.yaml --set train.label_smoothing=1.5", dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("label_smoothing"));
}

// train.ignore_class: padded label sequences ([N, T] labels, -100 after each sample's length, as
// PyTorch's ignore_index) train; eval counts the scored positions only; without ignore_class the
// pads are labels outside the classes, a data error naming the file, sample and position.
TEST_CASE("e2e loss: ignore_class -100 leaves pad labels unscored (train, eval's count), and without it they are a data error") {
  if (e2e::skip_without_python({{"numpy", "python3-numpy"}})) return;
  std::string dir = e2e::temp_dir("pads");
  const std::string py = e2e::python() + " -c \"import numpy as np\n"
                         "x = (np.arange(32) % 5).reshape(8, 4).astype(np.int32)\n"
                         "y = ((np.arange(32) * 7) % 3).reshape(8, 4).astype(np.int64)\n"
                         "for n in range(8): y[n, 1 + n % 4:] = -100\n"
                         "np.save('" + dir + "/x.npy', x); np.save('" + dir + "/y.npy', y)\"";
  REQUIRE(std::system(py.c_str()) == 0);  // scored: 1 + 2 + 3 + 4, twice = 20 of 32 positions
  const std::string yaml = R"(name: pads
seed: 5
model:
  input: [4]
  layers:
    - {name: tok, type: embedding, input_dim: 5, output_dim: 4}
    - {name: pos, type: position_embedding}
    - {name: head, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: npy, x: x.npy, labels: y.npy, classes: 3}
train: {epochs: 3, batch_size: 4, ignore_class: -100}
optimizer: {type: adam, lr: 0.01}
)";
  e2e::write_file(dir + "/c.yaml", yaml);
  auto r = e2e::trainer("run c.yaml --run-dir r", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto e = e2e::trainer("eval r --split train --confusion", dir);
  INFO(e.out << e.err);
  REQUIRE(e.code == 0);
  CHECK_THAT(e.out, Catch::Contains("20 positions"));
  std::string plain = yaml;
  plain.replace(plain.find(", ignore_class: -100"), 20, "");
  e2e::write_file(dir + "/p.yaml", plain);
  auto bad = e2e::trainer("run p.yaml --run-dir p", dir);
  CHECK(bad.code == 3);
  CHECK_THAT(bad.err, Catch::Contains("y.npy: sample 0 position 1 has label -100, outside 0..2 (classes: 3)"));
}
