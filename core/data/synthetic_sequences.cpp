// `type: synthetic_sequences`: noisy multi-feature sinusoid sequences from a few fixed "sources",
// as single sequences labelled by source or as same-source/different-source pairs; no storage.
#include <fmt/format.h>

#include <cmath>

#include "core/data/dataset.h"
#include "core/data/random.h"

namespace trainer {

namespace {

// Keys (all optional):
//   size: 2048        samples (pairs when inputs: 2)
//   length: 140       time steps T
//   features: 256     values per step F
//   inputs: 2         2: pairs of [T, F] sequences, label 1 when both come from one source (exactly
//                     half of each consecutive pair of indices, chosen pseudo-randomly), else 0;
//                     1: one [T, F] sequence labelled by its source (index % sources)
//   sources: 8        patterns, >= 2
//   noise: 0.5        std-dev of the Gaussian noise added to every value
//   seed: 0           the noise, offsets and pairing of every sample (and by default the sources)
//   source_seed: seed the sources alone: a validation set of new samples of the training set's
//                     sources is {seed: 1, source_seed: 0} (or use data.validation_split)
// Source s, feature f is x(t) = a * sin(w * t + p) with a in [0.7, 1.3] (random sign), w in
// [0.15, 1.5] rad/step, p in [0, 2 pi), all drawn from Rng{tag, source_seed, s, f}. A sample of
// source s is that pattern shifted by a random offset of up to half a step, times a random gain in
// [0.9, 1.1], plus noise: values lie mostly in [-2, 2] for noise 0.5. Two sources differ on
// every feature (independent frequencies and phases), so a same/different decision averages over
// T * F values: learnable by a small shared LSTM with a dense head, yet not trivial for large noise.
constexpr uint64_t kSourceTag = 0x5eed5e9500000001ULL;
constexpr uint64_t kPairTag = 0x5eed5e9500000002ULL;
constexpr uint64_t kSampleTag = 0x5eed5e9500000003ULL;

struct Params {
  int64_t size = 2048, length = 140, features = 256;
  int inputs = 2, sources = 8;
  double noise = 0.5;
  uint64_t seed = 0, source_seed = 0;
};

struct Wave {
  float a, w, p;
};

class SyntheticSequences final : public FloatDataset {
 public:
  explicit SyntheticSequences(Params p) : p_(p), waves_(size_t(p.sources) * size_t(p.features)) {
    for (int s = 0; s < p_.sources; ++s) {
      for (int64_t f = 0; f < p_.features; ++f) {
        Rng rng{kSourceTag, p_.source_seed, uint64_t(s), uint64_t(f)};
        Wave& w = waves_[size_t(s) * size_t(p_.features) + size_t(f)];
        w.a = float(rng.uniform(0.7, 1.3) * (rng.coin() ? 1.0 : -1.0));
        w.w = float(rng.uniform(0.15, 1.5));
        w.p = float(rng.uniform(0.0, 6.283185307179586));
      }
    }
  }

  int64_t size() const override { return p_.size; }
  Shape sample_shape() const override {
    return p_.inputs == 1 ? Shape{p_.length, p_.features} : Shape{p_.inputs * p_.length * p_.features};
  }
  std::vector<Shape> input_shapes() const override {
    return std::vector<Shape>(size_t(p_.inputs), Shape{p_.length, p_.features});
  }
  int num_classes() const override { return p_.inputs == 2 ? 2 : p_.sources; }
  std::vector<std::string> class_names() const override {
    if (p_.inputs == 2) return {"different", "same"};
    return Dataset::class_names();
  }
  std::string describe() const override {
    return fmt::format("synthetic_sequences: {} {}({}, {}) sequences from {} sources, {} classes (seed {}{}, noise {})",
                       p_.size, p_.inputs == 2 ? "pairs of " : "", p_.length, p_.features, p_.sources,
                       num_classes(), p_.seed,
                       p_.source_seed == p_.seed ? "" : fmt::format(", source_seed {}", p_.source_seed), p_.noise);
  }

  int32_t get_f32(int64_t i, float* values) const override {
    if (i < 0 || i >= p_.size)
      throw std::out_of_range(fmt::format("synthetic_sequences: sample {} outside 0..{}", i, p_.size - 1));
    const size_t n = size_t(p_.length) * size_t(p_.features);
    if (p_.inputs == 1) {
      const int s = int(i % p_.sources);
      sequence(s, i, 0, values);
      return s;
    }
    // Indices 2k and 2k+1: one of them is a same-source pair, the other a different-source pair.
    Rng pick{kPairTag, p_.seed, uint64_t(i / 2)};
    const int32_t label = int32_t((i & 1) ^ int64_t(pick.coin()));
    Rng src{kPairTag, p_.seed, uint64_t(i), 1};
    const int s1 = int(src.uniform_int(0, p_.sources - 1));
    const int s2 = label ? s1 : int((s1 + src.uniform_int(1, p_.sources - 1)) % p_.sources);
    sequence(s1, i, 0, values);
    sequence(s2, i, 1, values + n);
    return label;
  }

 private:
  // Input `k` of sample `i`, from source `s`.
  void sequence(int s, int64_t i, int k, float* out) const {
    Rng rng{kSampleTag, p_.seed, uint64_t(i), uint64_t(k)};
    const double offset = rng.uniform(-0.5, 0.5), gain = rng.uniform(0.9, 1.1);
    const Wave* waves = &waves_[size_t(s) * size_t(p_.features)];
    for (int64_t t = 0; t < p_.length; ++t) {
      const double time = double(t) + offset;
      for (int64_t f = 0; f < p_.features; ++f) {
        const Wave& w = waves[f];
        double v = gain * w.a * std::sin(w.w * time + w.p);
        if (p_.noise > 0) v += p_.noise * rng.normal();
        *out++ = float(v);
      }
    }
  }

  Params p_;
  std::vector<Wave> waves_;  // [sources][features]
};

std::shared_ptr<Dataset> make_synthetic_sequences(cfg::MapReader& r, const DatasetContext& /*ctx*/) {
  r.allow({"size", "length", "features", "inputs", "sources", "noise", "seed", "source_seed"});
  r.finish();  // unknown keys first, so a typo is named before any other complaint
  Params p;
  p.size = r.get_int("size", 2048, 1, int64_t(1) << 40);
  p.length = r.get_int("length", 140, 1, 1 << 20);
  p.features = r.get_int("features", 256, 1, 1 << 20);
  p.inputs = int(r.get_int("inputs", 2, 1, 2));
  p.sources = int(r.get_int("sources", 8, 2, 1 << 16));
  p.noise = r.get_float("noise", 0.5, 0.0, 100.0);
  p.seed = uint64_t(r.get_int("seed", 0, 0, INT64_MAX));
  p.source_seed = uint64_t(r.get_int("source_seed", int64_t(p.seed), 0, INT64_MAX));
  auto at = [&](const char* key) { return r.has(key) ? r.optional(key) : r.node(); };
  if (p.length * p.features > (int64_t(1) << 28))
    at("features").fail(fmt::format("length x features = {} values per sequence is too many (at most 2^28)",
                                    p.length * p.features));
  if (int64_t(p.sources) * p.features > (int64_t(1) << 26))
    at("sources").fail(fmt::format("sources x features = {} is too many (at most 2^26)", int64_t(p.sources) * p.features));
  return std::make_shared<SyntheticSequences>(p);
}

const bool registered = (register_dataset("synthetic_sequences", make_synthetic_sequences), true);

}  // namespace

}  // namespace trainer
