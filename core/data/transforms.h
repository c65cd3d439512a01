// Augmentation and normalisation of samples (the `data.augment:` section) and the statistics they need.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/random.h"
#include "core/io/config.h"
#include "core/tensor/shape.h"

namespace trainer {

// What happens to each uint8 HWC sample on its way into a float batch:
//   1. geometry (random for training loaders only): a crop from the zero-padded sample
//      (torchvision RandomCrop), then flips, then an integer translation (Keras shifts);
//   2. normalisation (every loader): x = (pixel - mean) / std * scale, at the output position.
struct Augment {
  // How pixels outside an image are filled. Keras' fill_mode names: nearest (aaaa|abcd|dddd),
  // reflect (dcba|abcd|dcba, edge repeated), wrap (abcd|abcd|abcd), constant (kkkk|abcd|kkkk).
  // torchvision's padding_mode names for crop: edge = nearest, symmetric = Keras reflect,
  // reflect = reflect without repeating the edge (dcb|abcd|cba), constant.
  enum class Fill { Nearest, Reflect, Wrap, Constant, Reflect101 };

  // Random integer translation by up to floor(shift * H) rows and floor(shift * W) columns each
  // way (Keras width/height_shift_range as a fraction), the uncovered border filled per
  // fill_mode (Keras' default 'nearest') with fill_value (in pixel units, 0..255, before the
  // normalisation, as Keras' cval).
  float shift = 0;
  Fill fill_mode = Fill::Nearest;
  float fill_value = 0;
  bool flip_horizontal = false;  // mirror left-right with probability 1/2
  bool flip_vertical = false;    // mirror top-bottom with probability 1/2

  // torchvision RandomCrop(size, padding): pad every side by `padding` (per padding_mode, fill
  // for constant), then take a height x width window at a uniformly random position. In
  // evaluation (center) the unpadded sample is centre-cropped instead (torchvision CenterCrop:
  // offset round((H - h) / 2), half to even; constant fill where the crop is larger).
  struct Crop {
    int height = 0, width = 0;  // 0: no crop
    int padding = 0;
    Fill padding_mode = Fill::Constant;
    float fill = 0;
    bool center = false;
    bool enabled() const { return height > 0; }
  };
  Crop crop;

  enum class Mean {
    None,        // no subtraction
    Constant,    // subtract mean_value from every element
    PerPixel,    // subtract the training set's mean image (H x W x C), as the Caffe/Keras CIFAR recipes
    PerChannel,  // subtract the per-channel mean and divide by the per-channel std (standardise)
  };
  Mean mean = Mean::None;
  float mean_value = 0;  // for Mean::Constant
  float scale = 1;       // multiplies after the mean (and std): 1/255 maps pixels to [0, 1]

  bool random() const { return shift > 0 || flip_horizontal || flip_vertical || (crop.enabled() && !crop.center); }
  bool needs_stats() const { return mean == Mean::PerPixel || mean == Mean::PerChannel; }
  // The same normalisation without the random transforms (a crop becomes a centre crop, so the
  // shape stays): what validation/test loaders use.
  Augment without_random() const {
    Augment a = *this;
    a.shift = 0, a.flip_horizontal = a.flip_vertical = false;
    a.crop.center = true;
    return a;
  }
  // The shape of a transformed sample: the crop's when cropping, else the sample's.
  Shape output_shape(const Shape& sample) const {
    return crop.enabled() ? Shape{crop.height, crop.width, sample[2]} : sample;
  }
};

// Reads an augment section's keys (all optional):
//   shift: 0.1                 fraction of height/width, 0 <= shift < 1
//   fill_mode: nearest         nearest | reflect | wrap | constant (Keras names; for shift)
//   fill_value: 0              for fill_mode: constant, in pixel units 0..255
//   flip: none                 none | horizontal | vertical | both
//   crop: {size: [H, W], padding: 4, padding_mode: constant, fill: 0}
//                              size an int or [H, W]; padding_mode constant | edge | reflect |
//                              symmetric (torchvision names)
//   mean: none                 none | per_pixel | per_channel | <number> (a constant, e.g. 127.5)
//   scale: 1                   a number or a fraction such as 1/255 (applied after the mean; not
//                              with per_channel, whose division by the deviation cancels it)
// Inputs in [-1, 1], MobileNetV2's preprocessing (keras.applications.mobilenet_v2.preprocess_input:
// x / 127.5 - 1): {mean: 127.5, scale: 1/127.5}. Keras rescale=1/255: {scale: 1/255}.
// Does not call reader.finish() (the caller may read more keys from the same map).
Augment parse_augment(cfg::MapReader& reader);
// The same for a whole section (an absent section gives the defaults), finishing the reader.
Augment parse_augment(const cfg::Node& section);

// Normalisation statistics, computed once over the training set and applied to every split.
struct NormStats {
  Augment::Mean kind = Augment::Mean::None;
  Shape shape;             // the sample shape (H, W, C) they were computed for
  std::vector<float> mean;    // PerPixel: H*W*C (an HWC image); PerChannel: C
  std::vector<float> stddev;  // PerChannel: C population standard deviations, each at least 1e-6; else empty
};

// Exact (integer sums) and so independent of thread count; `threads` <= 0 picks a default.
// Returns empty statistics for Mean::None / Mean::Constant; std::invalid_argument for a set with
// float samples (Dataset::float_samples) and PerPixel/PerChannel.
NormStats compute_stats(const Dataset& ds, Augment::Mean kind, int threads = 0);

// The statistics as a NumPy .npy file (format 1.0, little-endian float32, C order), so that
// evaluation, export and Python tools use exactly the numbers training used
// (numpy.load(path) reads it):
//   per_pixel    shape (H, W, C): the mean image;
//   per_channel  shape (2, C): row 0 the means, row 1 the standard deviations.
// Written to a temporary file and renamed. std::invalid_argument for None/Constant (nothing to
// save); DataError when the file cannot be written.
void save_stats(const NormStats& stats, const std::string& path);
// Reads what save_stats wrote (also '<f8' and a (C,) array of channel means, std = 1): the kind
// follows from the shape (rank 3: per_pixel; (2, C) or (C,): per_channel) and `shape` is set to
// the sample shape for per_pixel, (0, 0, C) for per_channel (any H, W). DataError naming the
// file for anything else.
NormStats load_stats(const std::string& path);

// The random choices for one sample (drawn from a per-sample Rng, so independent of threads).
struct RandomParams {
  int dy = 0, dx = 0;  // content moves down/right by dy/dx pixels
  bool flip_h = false, flip_v = false;
  int crop_top = 0, crop_left = 0;  // window position in the padded sample
};

// Augment + statistics specialised for one sample shape: apply() turns a uint8 sample into floats.
class SampleTransform {
 public:
  // Throws std::invalid_argument when the augment needs statistics and `stats` is null, and
  // DataError when the statistics were computed for another sample shape or the crop does not
  // fit the (padded) sample.
  SampleTransform(const Augment& a, const Shape& sample_shape, std::shared_ptr<const NormStats> stats);
  const Augment& augment() const { return aug_; }
  const Shape& input_shape() const { return in_; }
  const Shape& output_shape() const { return out_; }
  // Draws in a fixed order: flip_h, flip_v, dy, dx, crop_top, crop_left (those enabled).
  RandomParams draw(Rng& rng) const;
  // dst[y, x, c] = (src[map(y, x), c] - sub[y, x, c]) * mul[y, x, c] where map undoes the shift
  // (fill_mode), the flips and the crop (padding_mode), in that order.
  void apply(const uint8_t* src, float* dst, const RandomParams& p) const;

 private:
  Augment aug_;
  Shape in_, out_;
  int center_top_ = 0, center_left_ = 0;
  std::vector<float> sub_, mul_;  // per output element (H*W*C)
};

}  // namespace trainer
