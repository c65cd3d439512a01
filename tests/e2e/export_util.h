// The helpers of the ONNX export tests (export_test.cpp, export_layers_test.cpp): input files, a short training run, trainer predict, and compare.py's check with OpenCV.
#pragma once
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cli.h"

namespace e2e_export {

inline const std::string kPython = e2e::python();  // Debian's: python3-onnx, python3-opencv, python3-numpy

// Records a skip (Missing::Package) and returns true when kPython cannot import onnx, cv2 or numpy.
inline bool skip_without_python_deps() {
  return e2e::skip_without_python({{"onnx", "python3-onnx"}, {"cv2", "python3-opencv"}, {"numpy", "python3-numpy"}});
}

// A little-endian .npy file (format 1.0) of `dtype` ("|u1", "<f4") and shape.
inline std::string npy(const std::string& dtype, const std::vector<int64_t>& shape, const std::string& data) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  const uint16_t len = uint16_t(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + char(len & 0xff) + char(len >> 8) + header + data;
}

// N random images [N, H, W, 3] of uint8 pixels (fixed seed).
inline void write_pixels(const std::string& path, int64_t n, int64_t h, int64_t w) {
  std::mt19937 rng(7);
  std::string px(size_t(n * h * w * 3), '\0');
  for (char& c : px) c = char(rng() & 0xff);
  e2e::write_file(path, npy("|u1", {n, h, w, 3}, px));
}

// N random float32 rows of `elems` values (a sequence model's inputs, one after another).
inline void write_floats(const std::string& path, int64_t n, int64_t elems) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> v(size_t(n * elems));
  for (float& x : v) x = normal(rng);
  e2e::write_file(path, npy("<f4", {n, elems}, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)));
}

// A sequence set in dir: x.npy 16 random [7, 5] sequences (normal, seeded), y.npy their labels 0, 1, 2, ...
inline void write_sequence_set(const std::string& dir, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(16 * 7 * 5);
  for (float& f : v) f = normal(rng);
  e2e::write_file(dir + "/x.npy", npy("<f4", {16, 7, 5}, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)));
  std::string labels;
  for (int i = 0; i < 16; ++i) labels += char(i % 3), labels += std::string(3, '\0');
  e2e::write_file(dir + "/y.npy", npy("<i4", {16}, labels));
}

// A model of `layers` (YAML lines "    - {...}") over `input` on dir's x.npy and y.npy (3 classes):
// one epoch of batch 8, Adam.
inline std::string npy_model(const std::string& name, const std::string& input, const std::string& layers) {
  return "name: " + name + "\nseed: 1\nmodel:\n  input: " + input + "\n  layers:\n" + layers +
         "data:\n  train: {type: npy, x: x.npy, labels: y.npy, classes: 3}\n"
         "  val: {type: npy, x: x.npy, labels: y.npy, classes: 3}\n"
         "train: {epochs: 1, batch_size: 8}\noptimizer: {type: adam, lr: 0.01}\n";
}

// Two steps of `config` (in configs/, or an absolute path) with `sets` (synthetic data; batch-norm momentum 0, so that the moving
// statistics are a real batch's and folding them changes the weights visibly) into dir/run.
inline std::string train(const std::string& dir, const std::string& config, const std::string& sets) {
  const std::string path = config.front() == '/' ? config : TRAINER_SOURCE_DIR "/configs/" + config;
  e2e::Result r = e2e::trainer("run " + path +
                                   " --set train.epochs=1 --set train.steps_per_epoch=2 --run-dir run " + sets,
                               dir, "timeout 120");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return dir + "/run";
}

inline void predict(const std::string& dir, const std::string& inputs, const std::string& probs, const std::string& extra = "") {
  e2e::Result r = e2e::trainer("predict run " + inputs + " --probs " + probs + " " + extra, dir, "timeout 120");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
}

// Exports with `flags` and runs compare.py; returns its JSON line. `compare` adds its options.
inline nlohmann::json export_and_compare(const std::string& dir, const std::string& flags, const std::string& inputs,
                                  const std::string& probs, const std::string& compare, const std::string& note = "") {
  e2e::Result x = e2e::trainer("export run --onnx m.onnx " + flags, dir, "timeout 120");
  INFO("trainer export run --onnx m.onnx " << flags << "\n" << x.out << x.err);
  REQUIRE(x.code == 0);
  CHECK(x.err.empty());
  CHECK(x.out.find("ONNX opset ") != std::string::npos);
  // The command says what the input must hold (compare.py checks the model's doc_string alike).
  if (compare.find("--stats") != std::string::npos || compare.find("--mean") != std::string::npos)
    CHECK(x.out.find(flags.find("--normalize") != std::string::npos ? "raw pixels 0..255" : "the normalised image") !=
          std::string::npos);
  const std::string cmd = "cd '" + dir + "' && " + kPython + " '" TRAINER_SOURCE_DIR "/tests/e2e/onnx/compare.py' m.onnx " +
                          inputs + " " + probs + " " + compare + (flags.find("--normalize") != std::string::npos ? " --raw" : "") +
                          " >compare.out 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = e2e::read_file(dir + "/compare.out");
  INFO(cmd << "\n" << out);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  nlohmann::json j = e2e::last_json(out);
  std::string line = note + "[" + flags + "] opencv " + j.value("opencv", "?");
  if (j.contains("max_abs_diff")) line += ", max |difference| " + j["max_abs_diff"].dump();
  WARN(line);
  return j;
}

// Predicts `inputs` with the trained run, exports it as it is and checks that OpenCV runs the ONNX
// model to the same probabilities within 1e-4.
inline void check_opencv_agrees(const std::string& dir, const std::string& inputs, const std::string& compare,
                         const std::string& note = "") {
  predict(dir, inputs, "p.npy");
  nlohmann::json j = export_and_compare(dir, "", inputs, "p.npy", compare, note);
  CHECK(j.value("opencv", "") == "ok");
  CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
}

// The four variants every image model is checked in: batch norms folded or kept, the input
// normalised outside or inside the model.
inline void image_variants(const std::string& dir, const std::string& inputs, const std::string& probs, const std::string& norm) {
  for (const char* flags : {"", "--keep-batchnorm", "--normalize", "--normalize --keep-batchnorm"}) {
    nlohmann::json j = export_and_compare(dir, flags, inputs, probs, norm);
    CHECK(j.value("opencv", "") == "ok");
    CHECK(j.value("max_abs_diff", 1.0) <= 1e-4);
  }
}

}  // namespace e2e_export
