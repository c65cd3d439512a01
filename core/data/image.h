// Image helpers for the readers: JPEG decoding to RGB (libturbojpeg) and antialiased bilinear resizing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

// One libturbojpeg decompressor; not thread-safe, so keep one per thread.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the dimensions; DataError "<what>: <libjpeg's message>" when it is not a readable JPEG.
  void header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width);
  // Decodes to packed RGB (height*width*3 bytes at `rgb`): grayscale is replicated into three
  // channels, CMYK/YCCK converted. Anything libjpeg warns about (a truncated file, corrupt data)
  // is a DataError as well: training on half-grey images is worse than stopping with the path.
  void decode_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height, int width);
  // header + decode_rgb into `out`, resized to (out_h, out_w) when that differs from the file.
  void decode_rgb_resized(const uint8_t* data, size_t size, const std::string& what, uint8_t* out, int out_h,
                          int out_w);

 private:
  void* handle_;
  std::vector<uint8_t> scratch_;
};

// Resizes an HWC uint8 image with a bilinear (triangle) filter whose support widens on downscaling,
// as PIL's Image.resize(BILINEAR) does: plain bilinear interpolation when enlarging, an area-like
// average without aliasing when shrinking. Pixel centres are at +0.5 (align_corners=False).
void resize_bilinear(const uint8_t* src, int src_h, int src_w, int channels, uint8_t* dst, int dst_h, int dst_w);

}  // namespace trainer
