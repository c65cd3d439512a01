// Augmentation and normalisation of samples (the `data.augment:` section) and the statistics they need.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/random.h"
#include "core/io/config.h"
#include "core/tensor/shape.h"

namespace trainer {

// What happens to each uint8 HWC sample on its way into a float batch:
//   1. random transforms (training loaders only): an integer translation and flips;
//   2. normalisation (every loader): x = (pixel - mean) / std * scale.
struct Augment {
  // Random integer translation by up to floor(shift * H) rows and floor(shift * W) columns each
  // way (Keras width/height_shift_range as a fraction), the uncovered border filled with the
  // nearest edge pixel (Keras fill_mode='nearest').
  float shift = 0;
  bool flip_horizontal = false;  // mirror left-right with probability 1/2
  bool flip_vertical = false;    // mirror top-bottom with probability 1/2

  enum class Mean {
    None,        // no subtraction
    Constant,    // subtract mean_value from every element
    PerPixel,    // subtract the training set's mean image (H x W x C), as the Caffe/Keras CIFAR recipes
    PerChannel,  // subtract the per-channel mean and divide by the per-channel std (standardise)
  };
  Mean mean = Mean::None;
  float mean_value = 0;  // for Mean::Constant
  float scale = 1;       // multiplies after the mean (and std): 1/255 maps pixels to [0, 1]

  bool random() const { return shift > 0 || flip_horizontal || flip_vertical; }
  bool needs_stats() const { return mean == Mean::PerPixel || mean == Mean::PerChannel; }
  // The same normalisation without the random transforms: what validation/test loaders use.
  Augment without_random() const {
    Augment a = *this;
    a.shift = 0, a.flip_horizontal = a.flip_vertical = false;
    return a;
  }
};

// Reads an augment section's keys (all optional):
//   shift: 0.1                 fraction of height/width, 0 <= shift < 1
//   flip: none                 none | horizontal | vertical | both
//   mean: none                 none | per_pixel | per_channel | <number> (a constant, e.g. 127.5)
//   scale: 1                   a number or a fraction such as 1/255 (applied after the mean)
// e.g. [-1, 1] inputs: {mean: 127.5, scale: 1/127.5}; Keras rescale=1/255: {scale: 1/255}.
// Does not call reader.finish() (the caller may read more keys from the same map).
Augment parse_augment(cfg::MapReader& reader);
// The same for a whole section (an absent section gives the defaults), finishing the reader.
Augment parse_augment(const cfg::Node& section);

// Normalisation statistics, computed once over the training set and applied to every split.
struct NormStats {
  Augment::Mean kind = Augment::Mean::None;
  Shape shape;                 // the sample shape (H, W, C) they were computed for
  std::vector<float> mean;     // PerPixel: H*W*C (an HWC image); PerChannel: C
  std::vector<float> inv_std;  // PerChannel: C values 1 / max(std, 1e-6); empty otherwise
};

// Exact (integer sums) and so independent of thread count; `threads` <= 0 picks a default.
// Returns empty statistics for Mean::None / Mean::Constant.
NormStats compute_stats(const Dataset& ds, Augment::Mean kind, int threads = 0);

// The random choices for one sample (drawn from a per-sample Rng, so independent of threads).
struct RandomParams {
  int dy = 0, dx = 0;  // content moves down/right by dy/dx pixels
  bool flip_h = false, flip_v = false;
};

// Augment + statistics specialised for one sample shape: apply() turns a uint8 sample into floats.
class SampleTransform {
 public:
  // Throws std::invalid_argument when the augment needs statistics and `stats` is null, and
  // DataError when the statistics were computed for another sample shape.
  SampleTransform(const Augment& a, const Shape& sample_shape, std::shared_ptr<const NormStats> stats);
  const Augment& augment() const { return aug_; }
  // Draws in a fixed order: flip_h, flip_v, dy, dx (only those the augment enables).
  RandomParams draw(Rng& rng) const;
  // The sample flipped, then moved by (dy, dx) with edge pixels repeated into the uncovered border,
  // then normalised: dst[y, x, c] = (flipped[clamp(y - dy), clamp(x - dx), c] - sub[y, x, c]) * mul[y, x, c].
  void apply(const uint8_t* src, float* dst, const RandomParams& p) const;

 private:
  Augment aug_;
  int h_, w_, c_;
  std::vector<float> sub_, mul_;  // per element (H*W*C)
};

}  // namespace trainer
