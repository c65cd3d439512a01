// Image helpers for the readers: JPEG (libjpeg-turbo) and PNG (libpng) decoding to RGB, and antialiased bilinear resizing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainer {

// What a file holds, told by its first bytes (not by its name).
enum class ImageFormat { Unknown, Jpeg, Png };
ImageFormat sniff_image(const uint8_t* data, size_t size);

// JPEG through libjpeg's API; keeps one decompressor, so keep one JpegDecoder per thread.
//   - grayscale is replicated into three channels; YCbCr/RGB decode to RGB;
//   - CMYK and YCCK become RGB as PIL does: with an Adobe APP14 marker (Photoshop) the values are
//     stored inverted and R = C * K / 255, without it R = (255 - C) * (255 - K) / 255;
//   - libjpeg's corrupt-data warnings (premature end of file, bad Huffman code, ...) are errors:
//     training on half-grey images is worse than stopping with the path. Warnings that leave the
//     pixels intact (extraneous bytes before a marker, unknown JFIF revision, bad ICC marker) are not.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the dimensions; DataError "<what>: cannot decode JPEG: <libjpeg's message>".
  void header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width);
  // Decodes to packed RGB (height*width*3 bytes at `rgb`); the file must be height x width.
  void decode_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height, int width);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// PNG through libpng (stateless, thread-safe). Every PNG colour type becomes 8-bit RGB:
//   - 16-bit samples are scaled to 8 bits with rounding (v * 255 / 65535), 1/2/4-bit gray expanded;
//   - palette images take their palette colours; gray is replicated into three channels;
//   - alpha (RGBA, gray+alpha, a tRNS chunk) is DROPPED, keeping the stored colour of each pixel,
//     as PIL's Image.convert("RGB") does, so the pixels equal those Keras' load_img and
//     torchvision's ImageFolder give for the same file (compositing on black would differ from both);
//   - no gamma or ICC correction (as PIL), ancillary-chunk warnings ignored; a truncated file,
//     a bad CRC in a critical chunk or corrupt compressed data is a DataError.
void png_header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width);
void decode_png_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height, int width);

// The default of `data.max_image_mb`: the most one decoded image (H x W x 3 bytes) may take.
constexpr int64_t kDefaultMaxImageMb = 256;
// Its ceiling: the decoders never take more than 2^28 pixels (768 MiB as RGB).
constexpr int64_t kMaxImageMbCeiling = 768;

// JPEG or PNG by content; anything else is DataError "<what>: not a JPEG or PNG file". One per thread.
// header() refuses an image whose decoded size exceeds max_bytes() before anything is allocated
// ("<what>: image is 10000x10000 (HxW), 286 MiB decoded, more than data.max_image_mb (256)").
class ImageDecoder {
 public:
  void set_max_bytes(uint64_t bytes) { max_bytes_ = bytes; }
  uint64_t max_bytes() const { return max_bytes_; }
  void header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width);
  void decode_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height, int width);
  // header + decode_rgb into `out`, resized (resize_bilinear) to out_h x out_w when the file differs.
  void decode_rgb_resized(const uint8_t* data, size_t size, const std::string& what, uint8_t* out, int out_h,
                          int out_w);

 private:
  JpegDecoder jpeg_;
  std::vector<uint8_t> full_;
  uint64_t max_bytes_ = uint64_t(kDefaultMaxImageMb) << 20;
};

// Resizes an HWC uint8 image with a bilinear (triangle) filter whose support widens on downscaling,
// as PIL's Image.resize(BILINEAR) does: plain bilinear interpolation when enlarging, an area-like
// average without aliasing when shrinking. Pixel centres are at +0.5 (align_corners=False).
void resize_bilinear(const uint8_t* src, int src_h, int src_w, int channels, uint8_t* dst, int dst_h, int dst_w);

}  // namespace trainer
