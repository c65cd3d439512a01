// Shared by the fixed-step tests: a small network with every kind of per-step value, a config
// reader, fixed batches, an environment variable set for a scope.
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/run/plan.h"

namespace trainer::test_fixed {

// Convolution, batch norm with its fused ReLU, dropout, pooling, spatial and Gaussian dropout, dense, softmax:
// every kind of per-step value (the rate, Adam's bias corrections, the loss scale, the dropout seeds).
inline const char* kNet = R"(
name: fixed
model:
  input: [8, 8, 3]
  layers:
    - {name: c1, type: conv2d, filters: 8, kernel: 3, padding: same}
    - {name: bn, type: batchnorm}
    - {name: r1, type: relu}
    - {name: drop, type: dropout, rate: 0.25}
    - {name: pool, type: max_pool2d, pool: 2}
    - {name: sdrop, type: spatial_dropout2d, rate: 0.2}
    - {name: gdrop, type: gaussian_dropout, rate: 0.1}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: out, type: softmax}
data:
  train: {type: synthetic, size: 64, shape: [8, 8, 3], classes: 5}
)";

// An environment variable set (null: unset) for a scope, then restored, even when a check throws.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* was = std::getenv(name);
    had_ = was != nullptr;
    if (had_) old_ = was;
    set(value);
  }
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) {
    if (value) setenv(name_, value, 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

inline RunSpec spec(const std::vector<std::string>& sets) {
  return read_run_spec(cfg::parse_document(kNet, "fixed.yaml", sets));
}

// A fixed batch of `n` samples (the same on every call).
struct HostBatch {
  Tensor images, labels;
};
inline HostBatch batch(int64_t n, int classes, uint64_t seed = 5) {
  HostBatch b{Tensor::empty(Shape{n, 8, 8, 3}), Tensor::empty(Shape{n}, DType::I32)};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.f32()[i] = nd(rng);
  for (int64_t i = 0; i < n; ++i) b.labels.i32()[i] = int32_t(rng() % uint64_t(classes));
  return b;
}

inline bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace trainer::test_fixed
