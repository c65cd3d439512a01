// libFuzzer target for the image decoders (built twice: jpeg_fuzz and png_fuzz, seeded with JPEGs or PNGs).
//
// Each input is one image file's bytes. It goes through what an image_folder does with a file:
// ImageDecoder::header (format by content, the data.max_image_mb refusal, here at 4 MiB), then
// decode_rgb_resized to a small odd size (the full decode into the decoder's buffer, then the
// antialiased resize). DataError is the documented answer to a bad file (exit 3) and is
// swallowed; anything else, a sanitizer report, a timeout or a leak is a crash.
#include <cstddef>
#include <cstdint>

#include "core/data/image.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static trainer::ImageDecoder decoder;  // one per thread in the readers; reused across files as there
  decoder.set_max_bytes(4 << 20);
  fuzz::refusals_expected([&] {
    int h = 0, w = 0;
    decoder.header(data, size, "fuzz.img", h, w);
    if (h <= 0 || w <= 0 || uint64_t(h) * uint64_t(w) * 3 > decoder.max_bytes()) __builtin_trap();
    uint8_t out[7 * 5 * 3];
    decoder.decode_rgb_resized(data, size, "fuzz.img", out, 7, 5);
  });
  return 0;
}
