// `trainer predict` (table, CSV, .npy, folders, bad inputs, another model's checkpoint) and train.ema
// through the CLI: the average's formula between checkpoints, resume exact, eval/predict choosing it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cli.h"
#include "core/io/safetensors.h"

namespace fs = std::filesystem;
using Catch::Contains;
using Catch::StartsWith;

namespace {

// One optimizer step per epoch (16 samples, batch 16), batch norm (its statistics are averaged
// too), SGD: the checkpoints of consecutive epochs are consecutive steps.
const char* kConfig = R"(name: ema
seed: 4
model:
  input: [12, 12, 3]
  layers:
    - {name: conv, type: conv2d, filters: 6, kernel: 3, padding: same, use_bias: false}
    - {name: bn, type: batchnorm}
    - {name: relu, type: relu}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 4}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 16, image_size: 12, classes: 4, seed: 1}
  val: {type: synthetic, size: 24, image_size: 12, classes: 4, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 4, batch_size: 16, ema: {decay: 0.8, every: 2}}
optimizer: {type: sgd, lr: 0.2, momentum: 0.9}
checkpoint: {keep: 100}
)";

std::vector<float> tensor(const std::string& file, const std::string& name) {
  trainer::SafeTensorsReader r(file);
  return r.f32(name);
}

std::vector<std::string> weight_names(const std::string& file) {
  trainer::SafeTensorsReader r(file);
  std::vector<std::string> out;
  for (const trainer::SafeTensor& t : r.tensors())
    if (t.name.find('/') != std::string::npos && t.name.rfind("optimizer/", 0) != 0 && t.name.rfind("data/", 0) != 0 &&
        t.name.rfind("ema/", 0) != 0)
      out.push_back(t.name);
  return out;
}

// "input,class_1,probability_1,..." rows of a predict CSV, split on commas (no quoting in these).
std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::istringstream l(line);
    for (std::string c; std::getline(l, c, ',');) cells.push_back(c);
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("e2e ema: the average follows avg = d*avg + (1-d)*w every 2nd step, batch-norm statistics included — eval and predict use it") {
  const std::string dir = e2e::temp_dir("ema");
  e2e::write_file(dir + "/c.yaml", kConfig);
  auto r = e2e::trainer("run c.yaml --run-dir full", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const std::string ck = dir + "/full/checkpoints/epoch-000";
  const std::vector<std::string> names = weight_names(ck + "4.safetensors");
  REQUIRE(names.size() == 7);  // conv kernel; bn gamma, beta, moving mean and variance; dense kernel and bias
  for (const std::string& n : names) {
    INFO(n);
    const std::vector<float> a2 = tensor(ck + "2.safetensors", "ema/" + n), a3 = tensor(ck + "3.safetensors", "ema/" + n),
                             a4 = tensor(ck + "4.safetensors", "ema/" + n), w4 = tensor(ck + "4.safetensors", n),
                             w3 = tensor(ck + "3.safetensors", n);
    CHECK(a3 == a2);  // step 3 is not a multiple of every: 2
    double moved = 0;
    for (size_t i = 0; i < a4.size(); ++i) {
      const double want = 0.8 * double(a2[i]) + 0.2 * double(w4[i]);
      CHECK(std::abs(a4[i] - want) <= 1e-6 * (1 + std::abs(want)));
      moved = std::max(moved, double(std::abs(w4[i] - w3[i])));
    }
    CHECK(moved > 0);  // every parameter trains or tracks statistics
  }
  // Validation reports both; eval takes the average by default, the trained weights with --no-ema,
  // and measures what validation measured.
  const std::map<std::string, double> m = e2e::last_metrics(dir + "/full");
  REQUIRE(m.count("val_accuracy_ema"));
  REQUIRE(m.count("val_loss_ema"));
  CHECK(m.at("val_loss_ema") != m.at("val_loss"));
  auto ev = e2e::trainer("eval full --json", dir);
  INFO(ev.out << ev.err);
  REQUIRE(ev.code == 0);
  CHECK(std::abs(e2e::last_json(ev.out)["loss"].get<double>() - m.at("val_loss_ema")) <= 1e-6);
  CHECK(e2e::last_json(ev.out)["accuracy"].get<double>() == Approx(m.at("val_accuracy_ema")));
  auto ev2 = e2e::trainer("eval full --json --no-ema", dir);
  REQUIRE(ev2.code == 0);
  CHECK(std::abs(e2e::last_json(ev2.out)["loss"].get<double>() - m.at("val_loss")) <= 1e-6);
  auto p = e2e::trainer("predict full " TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/bird32x32.jpg --probs a.npy", dir);
  INFO(p.out << p.err);
  REQUIRE(p.code == 0);
  CHECK_THAT(p.out, Contains("moving-average (train.ema) weights"));
  auto q = e2e::trainer("predict full " TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/bird32x32.jpg --probs t.npy --no-ema", dir);
  REQUIRE(q.code == 0);
  CHECK_THAT(q.out, Contains("trained weights"));
  CHECK(e2e::read_file(dir + "/a.npy") != e2e::read_file(dir + "/t.npy"));
}

TEST_CASE("e2e ema: a run stopped and resumed ends bit-identical to an uninterrupted one, average included — two replicas match one") {
  const std::string dir = e2e::temp_dir("ema_resume");
  e2e::write_file(dir + "/c.yaml", std::string(kConfig) + "schedule: {type: constant}\n");
  auto full = e2e::trainer("run c.yaml --run-dir full", dir);
  REQUIRE(full.code == 0);
  auto cut = e2e::trainer("run c.yaml --run-dir cut", dir, "TRAINER_TEST_SIGINT_AT_STEP=3");
  INFO(cut.out << cut.err);
  REQUIRE(cut.code == 130);
  auto res = e2e::trainer("run --resume cut --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(e2e::read_file(dir + "/full/checkpoints/epoch-0004.safetensors") ==
        e2e::read_file(dir + "/resumed/checkpoints/epoch-0004.safetensors"));
  CHECK(e2e::read_file(dir + "/full/metrics.csv") == e2e::read_file(dir + "/resumed/metrics.csv"));
  // Two replicas of 8 (batch norm statistics from rank 0's half, so without batch norm here).
  std::string yaml = std::string(kConfig);
  yaml.replace(yaml.find("    - {name: bn, type: batchnorm}\n"), std::string("    - {name: bn, type: batchnorm}\n").size(), "");
  e2e::write_file(dir + "/nobn.yaml", yaml);
  REQUIRE(e2e::trainer("run nobn.yaml --run-dir one", dir).code == 0);
  REQUIRE(e2e::trainer("run nobn.yaml --run-dir two --cpu 2 --set train.batch_size=8", dir).code == 0);
  const std::string a = dir + "/one/checkpoints/epoch-0004.safetensors", b = dir + "/two/checkpoints/epoch-0004.safetensors";
  for (const std::string& n : weight_names(a)) {
    const std::vector<float> x = tensor(a, "ema/" + n), y = tensor(b, "ema/" + n);
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(x[i] - y[i]) <= 1e-5 * (1 + std::abs(x[i])));
  }
}

TEST_CASE("e2e predict: a table, CSV rows and .npy probabilities for images, folders and .npy batches — class names from training") {
  const std::string dir = e2e::temp_dir("predict");
  e2e::write_file(dir + "/c.yaml", kConfig);
  REQUIRE(e2e::trainer("run c.yaml --run-dir r --set train.epochs=1", dir).code == 0);
  fs::create_directories(dir + "/imgs/sub");
  fs::copy_file(TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/bird32x32.jpg", dir + "/imgs/b.jpg");
  fs::copy_file(TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/rgb4x4.png", dir + "/imgs/sub/a.png");
  e2e::write_file(dir + "/imgs/notes.txt", "not an image name: ignored in a folder");
  auto p = e2e::trainer("predict r imgs " TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/rgb4x4.png --top 2 --csv p.csv --probs p.npy",
                        dir);
  INFO(p.out << p.err);
  REQUIRE(p.code == 0);
  CHECK(p.err.empty());
  CHECK_THAT(p.out, StartsWith("Checkpoint: r/checkpoints/epoch-0001.safetensors (epoch 1, step 1), moving-average"));
  CHECK_THAT(p.out, Contains("top-1") && Contains("top-2") && !Contains("top-3"));
  // A folder's images sorted by path (subfolders included), then the file; synthetic's class names.
  const auto rows = csv_rows(e2e::read_file(dir + "/p.csv"));
  REQUIRE(rows.size() == 4);
  CHECK(rows[0] == std::vector<std::string>{"input", "class_1", "probability_1", "class_2", "probability_2"});
  CHECK(rows[1][0] == "imgs/b.jpg");
  CHECK(rows[2][0] == "imgs/sub/a.png");
  const std::vector<std::string> shapes{"circle", "square", "triangle", "ring"};
  // The .npy holds every probability: rows sum to 1, the CSV's top classes are its largest.
  const std::string npy = e2e::read_file(dir + "/p.npy");
  REQUIRE(npy.size() > 128);
  const size_t header = size_t(uint8_t(npy[8])) + 256 * size_t(uint8_t(npy[9])) + 10;
  CHECK_THAT(npy.substr(0, header), Contains("'shape': (3, 4)") && Contains("'<f4'"));
  REQUIRE(npy.size() == header + 3 * 4 * sizeof(float));
  const float* probs = reinterpret_cast<const float*>(npy.data() + header);
  for (size_t i = 0; i < 3; ++i) {
    double sum = 0;
    size_t best = 0;
    for (size_t j = 0; j < 4; ++j) {
      sum += probs[i * 4 + j];
      if (probs[i * 4 + j] > probs[i * 4 + best]) best = j;
    }
    CHECK(std::abs(sum - 1) < 1e-5);
    CHECK(rows[i + 1][1] == shapes[best]);
    CHECK(std::abs(std::stod(rows[i + 1][2]) - probs[i * 4 + best]) < 1e-7);
  }
  // The same image twice (in the folder and given alone) gives the same probabilities.
  CHECK(std::equal(probs + 4, probs + 8, probs + 8));
  // Pixels in a .npy batch [N, H, W, C], as uint8 or as whole-number floats, predict alike, in
  // batches of any size.
  std::string u8, f32;
  for (int i = 0; i < 2 * 12 * 12 * 3; ++i) {
    const uint8_t v = uint8_t((i * 37 + i / 7) % 256);
    const float f = v;
    u8.push_back(char(v));
    f32.append(reinterpret_cast<const char*>(&f), sizeof f);
  }
  auto npy_file = [](const std::string& descr, const std::string& data) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 12, 12, 3), }";
    dict += std::string(117 - dict.size(), ' ') + "\n";
    return std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + data;
  };
  e2e::write_file(dir + "/u8.npy", npy_file("|u1", u8));
  e2e::write_file(dir + "/f32.npy", npy_file("<f4", f32));
  auto a = e2e::trainer("predict r u8.npy --probs a.npy --batch 1", dir);
  INFO(a.out << a.err);
  REQUIRE(a.code == 0);
  CHECK_THAT(a.out, Contains("u8.npy[1]"));
  // The same batch size, the same kernels: the same bits.
  auto b1 = e2e::trainer("predict r f32.npy --probs b1.npy --batch 1", dir);
  REQUIRE(b1.code == 0);
  CHECK(e2e::read_file(dir + "/a.npy") == e2e::read_file(dir + "/b1.npy"));
  // Another batch size: oneDNN may pick kernels that add each convolution's 27 products, the
  // average pooling's 144 terms and the dense layer's 6 in another order (on an AVX2-only CPU a
  // batch of 1 and of 2 differ by one f32 ulp, 3e-8: measured 2026-11-28). Reordering an f32 sum
  // of n terms moves it by at most 2(n-1) 2^-24 of its terms' absolute sum: here about 2^-15 of
  // the logits' absolute sums, which are of order 1, and softmax's probabilities move by at most
  // twice their logits' change. So within 1e-5, far below any difference a wrong input would make.
  auto b = e2e::trainer("predict r f32.npy --probs b.npy", dir);
  REQUIRE(b.code == 0);
  const std::string pa = e2e::read_file(dir + "/a.npy"), pb = e2e::read_file(dir + "/b.npy");
  REQUIRE(pa.size() == 128 + 2 * 4 * sizeof(float));
  REQUIRE(pb.size() == pa.size());
  CHECK(pa.substr(0, 128) == pb.substr(0, 128));  // the header: shape and type
  for (size_t i = 0; i < 2 * 4; ++i) {
    float x, y;
    std::memcpy(&x, pa.data() + 128 + 4 * i, 4);
    std::memcpy(&y, pb.data() + 128 + 4 * i, 4);
    INFO("probability " << i << ": batch 1 " << x << ", default batch " << y);
    CHECK(std::abs(double(x) - double(y)) <= 1e-5);
  }
}

TEST_CASE("e2e predict: bad inputs are named one line each and the others still predicted (exit 3) — another model's checkpoint is refused (exit 2)") {
  const std::string dir = e2e::temp_dir("predict_bad");
  e2e::write_file(dir + "/c.yaml", kConfig);
  REQUIRE(e2e::trainer("run c.yaml --run-dir r --set train.epochs=1", dir).code == 0);
  e2e::write_file(dir + "/notes.png", "this is text, not a PNG");
  fs::create_directories(dir + "/empty");
  auto p = e2e::trainer("predict r missing.jpg notes.png empty " TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/bird32x32.jpg --csv p.csv",
                        dir);
  INFO(p.out << p.err);
  CHECK(p.code == 3);
  CHECK(p.err ==
        "data error: missing.jpg: no such file or folder\n"
        "data error: notes.png: not a JPEG or PNG file (first bytes 74 68 69 73 20 69 73 20)\n"
        "data error: empty: holds no images (.jpg, .jpeg, .png)\n");
  CHECK(csv_rows(e2e::read_file(dir + "/p.csv")).size() == 2);  // the header and the one image
  // A .npy of the wrong shape, and of values that are not pixels.
  e2e::write_file(dir + "/x.npy", std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                                      std::string(118 - 60, ' ') + "\n" + std::string(24, '\0'));
  auto n = e2e::trainer("predict r x.npy", dir);
  CHECK(n.code == 3);
  CHECK_THAT(n.err, StartsWith("data error: x.npy: holds an array of shape (2, 3), the model takes [N, 12, 12, 3] or [12, 12, 3]\n"));
  // Another model's config for this checkpoint: one line naming the checkpoint, exit 2.
  std::string other = kConfig;
  other.replace(other.find("filters: 6"), 10, "filters: 5");
  e2e::write_file(dir + "/other.yaml", other);
  auto o = e2e::trainer("predict r " TRAINER_SOURCE_DIR "/tests/e2e/bad_inputs/bird32x32.jpg --config other.yaml", dir);
  CHECK(o.code == 2);
  CHECK_THAT(o.err, Contains("epoch-0001.safetensors: 'ema/conv/kernel' has shape 3x3x3x6, the model's is 3x3x3x5 (does the config match the checkpoint?)"));
  CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
}
