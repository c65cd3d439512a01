// PNG decoding to 8-bit RGB with libpng: every colour type and bit depth, alpha dropped (see image.h).
#include <fmt/format.h>
#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/data/dataset.h"
#include "core/data/image.h"

namespace trainer {

namespace {

constexpr uint64_t kMaxPixels = uint64_t(1) << 28;

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// libpng's state for one file: the bytes it reads and the first error it reports. Everything
// touched between setjmp and a longjmp out of libpng lives here.
struct PngRead {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  char message[256] = {};
  png_structp png = nullptr;
  png_infop info = nullptr;
  int height = 0, width = 0;
};

extern "C" void png_on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}

extern "C" void png_on_warning(png_structp, png_const_charp) {}  // ancillary chunks only

extern "C" void png_on_read(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (r->size - r->pos < n) {
    std::snprintf(r->message, sizeof r->message, "truncated file (ends at byte %zu)", r->size);
    png_longjmp(png, 1);
  }
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

// Decodes into `rgb` (r.height x r.width x 3, already checked against the caller's size).
bool decode(PngRead& r, uint8_t* rgb) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_set_read_fn(r.png, &r, png_on_read);
  png_read_info(r.png, r.info);
  const int color = png_get_color_type(r.png, r.info), depth = png_get_bit_depth(r.png, r.info);
  if (depth == 16) png_set_scale_16(r.png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0) {
    if (depth < 8) png_set_expand_gray_1_2_4_to_8(r.png);
    png_set_gray_to_rgb(r.png);
  }
  png_set_strip_alpha(r.png);  // also what a palette's tRNS would have become
  const int passes = png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  if (png_get_channels(r.png, r.info) != 3 || png_get_bit_depth(r.png, r.info) != 8 ||
      png_get_rowbytes(r.png, r.info) != size_t(r.width) * 3) {
    std::snprintf(r.message, sizeof r.message, "libpng did not produce 8-bit RGB (%d channels, %d bits)",
                  int(png_get_channels(r.png, r.info)), int(png_get_bit_depth(r.png, r.info)));
    return false;
  }
  for (int pass = 0; pass < passes; ++pass)
    for (int y = 0; y < r.height; ++y) png_read_row(r.png, rgb + size_t(y) * size_t(r.width) * 3, nullptr);
  // Like PIL, chunks after the image data (up to IEND) are not required to be present.
  return true;
}

}  // namespace

void png_header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width) {
  if (sniff_image(data, size) != ImageFormat::Png) throw DataError(fmt::format("{}: not a PNG file", what));
  if (size < 33 || be32(data + 8) != 13 || std::memcmp(data + 12, "IHDR", 4) != 0)
    throw DataError(fmt::format("{}: cannot decode PNG: {}", what,
                                size < 33 ? "truncated before the end of the IHDR chunk" : "IHDR chunk missing"));
  const uint32_t w = be32(data + 16), h = be32(data + 20);
  if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu)
    throw DataError(fmt::format("{}: cannot decode PNG: invalid size {}x{}", what, h, w));
  if (uint64_t(w) * uint64_t(h) > kMaxPixels)
    throw DataError(fmt::format("{}: PNG is {}x{}, larger than this reader accepts", what, h, w));
  height = int(h), width = int(w);
}

void decode_png_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height, int width) {
  int h = 0, w = 0;
  png_header(data, size, what, h, w);
  if (h != height || w != width)
    throw std::logic_error(fmt::format("{}: decode_png_rgb asked for {}x{}, file is {}x{}", what, height, width, h, w));
  // libpng allocates the declared length of each chunk before the image data, then reads it: such
  // a chunk must fit in the file (a 70-byte file declaring a 1 GiB tEXt chunk made it allocate
  // 1 GiB; found by png_fuzz). IDAT is streamed, and what follows it is never read.
  for (size_t pos = 8; pos + 8 <= size && std::memcmp(data + pos + 4, "IDAT", 4) != 0;) {
    const uint64_t len = be32(data + pos);
    if (len > size - pos - 8 || size - pos - 8 - len < 4)
      throw DataError(fmt::format("{}: cannot decode PNG: the chunk at byte {} declares {} bytes, past the end of the "
                                  "{}-byte file", what, pos, len, size));
    pos += 12 + size_t(len);
  }
  PngRead r;
  r.data = data, r.size = size, r.height = h, r.width = w;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
  if (!r.png) throw std::runtime_error("png_create_read_struct failed");
  r.info = png_create_info_struct(r.png);
  if (!r.info) {
    png_destroy_read_struct(&r.png, nullptr, nullptr);
    throw std::runtime_error("png_create_info_struct failed");
  }
  // zTXt/iCCP chunks inflate into buffers of their own: at most 1000 times the file, 64 MiB.
  png_set_chunk_malloc_max(r.png, std::min<size_t>(size_t(64) << 20, std::max<size_t>(size * 1000, 1 << 16)));
  const bool ok = decode(r, rgb);
  png_destroy_read_struct(&r.png, &r.info, nullptr);
  if (!ok) throw DataError(fmt::format("{}: cannot decode PNG: {}", what, r.message));
}

}  // namespace trainer
