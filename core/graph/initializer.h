// Keras initialisers (keras.initializers): the kinds with their parameters, read from a layer's config, and the draw.
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "core/tensor/shape.h"

namespace trainer {

namespace cfg {
class MapReader;
}

// Keras 3's initialisers, with Keras's defaults. The variance-scaling family draws from fans
// (ParamSpec::fan_in/fan_out, or Keras's compute_fans of the shape); "normal" members are
// truncated at two standard deviations with the deviation corrected for it (0.8796...).
enum class InitKind {
  Zeros, Ones, Constant,       // Constant(value)
  RandomNormal,                // RandomNormal(mean 0, stddev 0.05), untruncated
  RandomUniform,               // RandomUniform(minval -0.05, maxval 0.05)
  TruncatedNormal,             // TruncatedNormal(mean 0, stddev 0.05): redrawn beyond 2 stddev of the mean
  GlorotUniform, GlorotNormal, HeUniform, HeNormal, LecunUniform, LecunNormal,
  VarianceScaling,             // VarianceScaling(scale 1, mode fan_in, distribution truncated_normal)
  Orthogonal,                  // Orthogonal(gain 1)
};

struct Initializer {
  enum class Mode { FanIn, FanOut, FanAvg };
  enum class Distribution { TruncatedNormal, UntruncatedNormal, Uniform };

  InitKind kind = InitKind::Zeros;
  double mean = 0.0, stddev = 0.05;      // RandomNormal, TruncatedNormal
  double minval = -0.05, maxval = 0.05;  // RandomUniform
  double value = 0.0;                    // Constant
  double scale = 1.0;                    // VarianceScaling
  Mode mode = Mode::FanIn;
  Distribution distribution = Distribution::TruncatedNormal;
  double gain = 1.0;                     // Orthogonal
  // An LSTM's unit_forget_bias: after the draw, the forget gate's quarter [n/4, n/2) is one (Keras
  // concatenates bias_initializer(U), ones(U), bias_initializer(2U)).
  bool forget_gate_ones = false;

  Initializer(InitKind k = InitKind::Zeros) : kind(k) {}  // NOLINT: a kind is an initialiser with Keras's defaults
  bool operator==(InitKind k) const { return kind == k; }
  std::string str() const;  // "random_normal(mean=0, stddev=0.02)", for messages and the summary
};

// The initialiser under `key` of a layer's config, `fallback` (a name) when absent. Keras's forms:
// a name (`he_normal`, Keras's class name `HeNormal`, the aliases `uniform`, `normal`), a map
// `{type: random_normal, stddev: 0.02}`, or Keras's serialised `{class_name: RandomNormal, config:
// {stddev: 0.02}}`. Unknown names and keys, and parameters out of range, fail at their file:line:col.
Initializer read_initializer(cfg::MapReader& r, const std::string& key, const char* fallback);

// Keras's compute_fans: rank 0 (1, 1); rank 1 (n, n); rank 2 (rows, cols); higher ranks
// (shape[-2]·rf, shape[-1]·rf) with rf the product of the leading axes.
std::pair<int64_t, int64_t> keras_fans(const Shape& shape);

// Fills out[0, shape.numel()) from rng.
void draw_initializer(const Initializer& init, const Shape& shape, int64_t fan_in, int64_t fan_out,
                      std::mt19937_64& rng, float* out);

}  // namespace trainer
