// `trainer predict`'s inputs: image files, folders of images and .npy batches read into one
// dataset of the model's sample shape; an input that cannot be read is named, the others kept.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace trainer {

struct PredictInputs {
  std::shared_ptr<Dataset> samples;  // in input order (a folder's images sorted by path), label 0
  std::vector<std::string> names;    // one per sample: the image's path, or "x.npy[3]" for a row of a batch
  std::vector<std::string> failed;   // "<path>: <why>", one per input that gave nothing
};

// `shapes`: the model's input shapes without batch. An image model (one input of [H, W, C]) takes
// PNG/JPEG files (C = 3) (resized to H x W as the readers resize, bilinear with antialiasing),
// folders (their images, subfolders included, sorted by path) and .npy arrays of uint8 pixels or
// whole-number floats 0..255, [N, H, W, C] or one [H, W, C]. Any other model takes .npy float
// arrays [N, ...the inputs' elements] or one sample. `max_image_mb`: data.max_image_mb.
PredictInputs read_predict_inputs(const std::vector<std::string>& inputs, const std::vector<Shape>& shapes,
                                  int64_t max_image_mb);

}  // namespace trainer
