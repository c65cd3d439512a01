// The device-parallel tests' models and drivers on virtual CPU devices: a BN-free CNN over two
// devices, the shared-LSTM model over three, and training them on one device, placed, on one
// data-parallel replica or as R hybrid copies, with or without accumulation.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/runtime/device_parallel/pipeline_copy.h"
#include "core/runtime/strategy.h"
#include "transformer_block.h"

namespace trainer::pipeline_test {

inline const char* const kCnn = R"(
name: dp_cnn
seed: 5
model:
  input: [8, 8, 3]
  layers:
    - {name: conv1, type: conv2d, filters: 6, kernel: 3, padding: same}
    - {name: relu1, type: relu}
    - {name: pool, type: max_pool2d, pool: 2}
    - {name: conv2, type: conv2d, filters: 8, kernel: 3, strides: 2, padding: same}
    - {name: relu2, type: relu}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
strategy: device_parallel
placement: {conv1: cpu:0, conv2: cpu:1}
)";

// Two sequences through one shared LSTM on two devices, merged on a third (the Keras FAQ model).
inline const char* const kSharedLstm = R"(
name: shared
seed: 3
model:
  inputs:
    - {name: a, shape: [5, 4]}
    - {name: b, shape: [5, 4]}
  layers:
    - {name: lstm_a, type: lstm, units: 6, inputs: [a]}
    - {name: lstm_b, share: lstm_a, inputs: [b]}
    - {name: merged, type: concat, inputs: [lstm_a, lstm_b]}
    - {name: hidden, type: dense, units: 8}
    - {name: relu, type: relu}
    - {name: out, type: dense, units: 1}
    - {name: sigmoid, type: sigmoid}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 2}
train: {loss: binary_crossentropy}
optimizer: {type: rmsprop, lr: 0.01}
strategy: device_parallel
placement: {lstm_a: cpu:1, lstm_b: cpu:2, merged: cpu}
)";

// A transformer block (dense per position, positions, layer norm, causal self-attention, a GELU MLP,
// residual adds) over two devices: the boundary carries the first residual sum.
inline const std::string kTransformer = std::string(R"(
name: pipe_transformer
seed: 7)") + test::kTransformerBlockModel + R"(data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
strategy: device_parallel
placement: {proj: cpu:0, ln2: cpu:1}
)";

// The GPT over two devices (embedding to the first layer norm; the rest) on random byte windows.
inline const std::string kGpt = std::string(R"(
name: pipe_gpt
seed: 7)") + test::kGptModel + R"(data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
strategy: device_parallel
placement: {tok: cpu:0, ln2: cpu:1}
)";

// `side` reads the first device's layer on the second and leads nowhere: backward never reaches
// it, so the second stage sends no gradient of that boundary back (the first adds zeros).
inline const char* const kDeadEnd = R"(
name: dead_end
seed: 4
model:
  input: [6]
  layers:
    - {name: a, type: dense, units: 7}
    - {name: side, type: dense, units: 3, inputs: [a]}
    - {name: b, type: dense, units: 5, inputs: [input]}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 64, image_size: 8, classes: 5}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
strategy: device_parallel
placement: {a: cpu:0, side: cpu:1}
)";

inline RunSpec experiment(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return read_run_spec(cfg::parse_document(yaml, "dp.yaml", sets));
}

inline std::vector<Device> cpus(const RunSpec& e) {
  std::vector<Device> d;
  for (size_t i = 0; i < e.placement.devices.size(); ++i) d.push_back(Device::cpu(int(i)));
  return d;
}

// A batch of n samples for a model with these inputs: values in [-1, 1), labels in [0, classes).
// `positions` > 0: labels [n, positions] (a label per position); `ids` > 0: values are token ids
// in [0, ids) (an input read by an embedding).
inline Batch random_batch(const std::vector<Shape>& shapes, int64_t n, int classes, uint32_t seed,
                          int64_t positions = 0, int64_t ids = 0) {
  int64_t total = 0;
  for (const Shape& s : shapes) total += s.numel();
  Batch b;
  b.images = Tensor::empty(Shape{n, total});
  b.labels = Tensor::empty(positions ? Shape{n, positions} : Shape{n}, DType::I32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n * total; ++i) b.images.f32()[i] = ids ? float(rng() % uint32_t(ids)) : u(rng);
  for (int64_t i = 0; i < b.labels.numel(); ++i) b.labels.i32()[i] = int32_t(rng() % uint32_t(classes));
  b.size = b.global_size = n;
  if (shapes.size() == 1) b.images = b.images.reshape(shapes[0].with_batch(n));
  return b;
}

// A random batch for e's model: token ids for an input an embedding reads (below its input_dim),
// a label per position for an output of scores per position ([T, classes]); with
// train.ignore_class, sample i's labels after its first 1 + (i + seed) mod T are that pad, and the
// batch counts its scored labels (Batch::global_scored, as the loader does).
inline Batch random_batch(const RunSpec& e, int64_t n, int classes, uint32_t seed) {
  const Graph g(e.model);
  int64_t ids = 0;
  for (const GraphNode& node : g.nodes())
    if (node.layer->type() == "embedding" && is_model_input(node.inputs[0])) ids = node.layer->params()[0].shape[0];
  const Shape out = g.output_shape();
  std::vector<Shape> shapes;
  for (const ModelInput& in : e.model.inputs) shapes.push_back(in.shape);
  Batch b = random_batch(shapes, n, classes, seed, out.rank() == 2 ? out[0] : 0, ids);
  if (e.train.ignore_class && out.rank() == 2) {
    const int64_t T = out[0];
    b.global_scored = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t t = 0; t < T; ++t) {
        int32_t& l = b.labels.i32()[i * T + t];
        if (t > (i + int64_t(seed)) % T) l = *e.train.ignore_class;
        else ++b.global_scored;
      }
  }
  return b;
}

// Every parameter's values by name.
inline std::map<std::string, std::vector<float>> by_name(ModelState& s) {
  std::vector<float> w = s.download_weights();
  std::map<std::string, std::vector<float>> out;
  for (const ParamEntry& p : s.entries()) out[p.name].assign(w.begin() + p.offset, w.begin() + p.offset + p.spec.shape.numel());
  return out;
}

inline double max_diff(const std::map<std::string, std::vector<float>>& a, const std::map<std::string, std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (const auto& [name, v] : a) {
    REQUIRE(b.count(name));
    const std::vector<float>& w = b.at(name);
    REQUIRE(v.size() == w.size());
    for (size_t i = 0; i < v.size(); ++i) d = std::max(d, double(std::fabs(v[i] - w[i])));
  }
  return d;
}

inline std::vector<Shape> input_shapes(const RunSpec& e) {
  std::vector<Shape> s;
  for (const ModelInput& in : e.model.inputs) s.push_back(in.shape);
  return s;
}

// Final weights after `steps` steps on one device.
inline std::map<std::string, std::vector<float>> train_single(const RunSpec& e, int steps, int classes) {
  Replica r(trainee_spec(e), Device::cpu(0), 1);
  for (int s = 0; s < steps; ++s) {
    Batch b = random_batch(e, 12, classes, uint32_t(100 + s));
    r.train_step(b.images, b.labels, 0.05f, uint64_t(s));
  }
  return by_name(r.state());
}

// Rows [lo, hi) of `all` as a batch of a step whose micro-batches hold `global` samples over every
// copy (a step of all's samples in one micro-batch scores all's labels: its global_scored).
inline Batch rows(const Batch& all, int64_t lo, int64_t hi, int64_t global) {
  Batch b;
  b.images = all.images.slice(lo, hi);
  b.labels = all.labels.slice(lo, hi);
  b.size = hi - lo;
  b.global_size = global;
  if (global == all.global_size) b.global_scored = all.global_scored;
  return b;
}

// Final weights after `steps` steps of the placed pipeline. `norms`, when given, receives each
// step's gradient norm (clipping on); step `poison` gets an inf gradient (loss scaling's test
// hook). `accumulate` k: each step's batch of 12 is k micro-batches of 12/k (train.accumulate k)
// and the inf goes into the step's first.
inline std::map<std::string, std::vector<float>> train_placed(RunSpec e, int steps, int classes,
                                                       std::vector<double>* norms = nullptr, int poison = -1,
                                                       int accumulate = 1) {
  e.train.accumulate = accumulate;
  PipelineCopy w(trainee_spec(e), cpus(e), 1);
  bool stop = false;
  for (int s = 0; s < steps; ++s) {
    if (s == poison) w.inject_nonfinite();
    Batch all = random_batch(e, 12, classes, uint32_t(100 + s));
    for (int i = 0; i < accumulate; ++i) {
      const int64_t lo = 12 * i / accumulate, hi = 12 * (i + 1) / accumulate;
      w.train_step(rows(all, lo, hi, hi - lo), 0.05f, uint64_t(s * accumulate + i), stop,
                   MicroStep{i, accumulate, accumulate > 1 ? scored_labels(all) : 0});
    }
    if (norms) norms->push_back(w.clip().grad_norm());
  }
  return by_name(w.state());
}

// The same on one device through the data-parallel worker (one replica), whose step clips.
inline std::map<std::string, std::vector<float>> train_worker(const RunSpec& e, int steps, int classes,
                                                       std::vector<double>* norms = nullptr) {
  ReplicaGroup group(trainee_spec(e), {Device::cpu(0)}, 1);
  group.run([&](ReplicaCopy& w) {
    bool stop = false;
    for (int s = 0; s < steps; ++s) {
      Batch b = random_batch(e, 12, classes, uint32_t(100 + s));
      w.train_step(b, 0.05f, uint64_t(s), stop);
      if (norms) norms->push_back(w.clip().grad_norm());
    }
  });
  return by_name(group.worker(0).state());
}


// R copies of the placed pipeline (strategy hybrid) on R x S virtual CPU devices, copy r taking rows
// [r*12/R, (r+1)*12/R) of each batch of 12; returns copy 0's weights, checking that every copy's
// equal it bitwise after every step.
// `accumulate` k: each copy's rows are k micro-batches (train.accumulate k).
inline std::map<std::string, std::vector<float>> train_hybrid(RunSpec e, int copies, int steps, int classes, bool* identical,
                                                       int poison = -1, int accumulate = 1) {
  e.strategy = StrategyKind::Hybrid;
  e.train.accumulate = accumulate;
  std::vector<Device> devices;
  for (size_t d = 0; d < size_t(copies) * e.placement.devices.size(); ++d) devices.push_back(Device::cpu(int(d)));
  std::unique_ptr<Strategy> s = strategy_type(StrategyKind::Hybrid).make(trainee_spec(e), devices, 1);
  REQUIRE(s->size() == copies);
  std::vector<std::vector<float>> w(static_cast<size_t>(copies));
  *identical = true;
  s->run([&](Trainee& t) {
    t.broadcast_parameters();
    bool stop = false;
    for (int step = 0; step < steps; ++step) {
      if (step == poison) t.inject_nonfinite();  // every copy is told; copy 0 puts the inf in, before the sum
      Batch all = random_batch(e, 12, classes, uint32_t(100 + step));
      const int64_t lo = 12 * t.rank() / copies, hi = 12 * (t.rank() + 1) / copies, n = hi - lo;
      for (int i = 0; i < accumulate; ++i)
        t.train_step(rows(all, lo + n * i / accumulate, lo + n * (i + 1) / accumulate, 12 / accumulate), 0.05f,
                     uint64_t(step * accumulate + i), stop, MicroStep{i, accumulate, accumulate > 1 ? scored_labels(all) : 0});
      w[size_t(t.rank())] = t.state().download_weights();
    }
  });
  for (int r = 1; r < copies; ++r) *identical = *identical && w[size_t(r)] == w[0];
  return by_name(s->trainee(0).state());
}

}  // namespace trainer::pipeline_test
