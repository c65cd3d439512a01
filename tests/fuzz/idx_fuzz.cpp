// libFuzzer target for `type: mnist_idx`: an IDX image file and an IDX label file, raw or gzip.
//
// fuzz::split cuts the input into the images file and the labels file (so mutations reach
// both, and the header consistency checks between them); both are written to
// the fuzzer's scratch directory and opened as a dataset, whose first samples are read.
// DataError (exit 3) and ConfigError are the documented refusals; anything else is a crash.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::Split s = fuzz::split(data, size);
  fuzz::write_file("idx/images", s.first, s.first_size);
  fuzz::write_file("idx/labels", s.second, s.second_size);
  fuzz::refusals_expected([] {
    auto ds = fuzz::open_dataset("{type: mnist_idx, images: idx/images, labels: idx/labels, classes: 256}");
    fuzz::drain(*ds);
  });
  return 0;
}
