// JpegDecoder: libjpeg(-turbo)'s decompressor with errors and corrupt-data warnings turned into DataError.
#include <fmt/format.h>
// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <stdexcept>

#include "core/data/dataset.h"
#include "core/data/image.h"

namespace trainer {

namespace {

// Larger images are refused rather than allocated (a corrupt header can claim 65535 x 65535).
constexpr uint64_t kMaxPixels = uint64_t(1) << 28;

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void on_jpeg_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings (level -1) that mean the pixels are damaged stop decoding like errors; trace
// messages (level >= 0) and warnings about metadata only are ignored.
extern "C" void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC) return;
  on_jpeg_error(cinfo);
}

// A progressive JPEG may hold any number of scans, each a pass over the whole image: a small
// file of thousands of tiny scans takes minutes to decode (libjpeg-turbo's own fuzzers stop at
// 500). Real encoders write about 10.
constexpr int kMaxScans = 500;

extern "C" void on_jpeg_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const int scans = reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number;
  if (scans > kMaxScans) {
    auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "more than %d progressive scans", kMaxScans);
    std::longjmp(e->jump, 1);
  }
}

}  // namespace

struct JpegDecoder::Impl {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
  std::vector<uint8_t> row;  // one CMYK row
  int height = 0, width = 0;
  bool cmyk = false, adobe = false;

  Impl() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_jpeg_error;
    err.pub.emit_message = on_jpeg_message;
    err.message[0] = '\0';
    jpeg_create_decompress(&cinfo);  // cannot fail but for out-of-memory, which error_exit would report
    progress.progress_monitor = on_jpeg_progress;
    cinfo.progress = &progress;
  }
  ~Impl() { jpeg_destroy_decompress(&cinfo); }

  // Everything between setjmp and a longjmp out of libjpeg lives in this object (no locals that
  // could be clobbered, no C++ objects to unwind). Returns false with `err.message` on failure.
  // With `rgb` null, or when the file is not expect_h x expect_w, only the header is read.
  bool run(const uint8_t* data, size_t size, uint8_t* rgb, int expect_h, int expect_w) {
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);  // back to the start state for the next file
      return false;
    }
    jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(&cinfo, TRUE);
    height = int(cinfo.image_height), width = int(cinfo.image_width);
    cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    adobe = cinfo.saw_Adobe_marker != 0;
    if (!rgb || height != expect_h || width != expect_w || uint64_t(height) * uint64_t(width) > kMaxPixels) {
      jpeg_abort_decompress(&cinfo);
      return true;
    }
    if (cmyk && row.size() < size_t(width) * 4) row.resize(size_t(width) * 4);
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // libjpeg-turbo expands grayscale to RGB
    jpeg_start_decompress(&cinfo);
    while (cinfo.output_scanline < cinfo.output_height) {
      uint8_t* out = rgb + size_t(cinfo.output_scanline) * size_t(width) * 3;
      JSAMPROW line = cmyk ? row.data() : out;
      jpeg_read_scanlines(&cinfo, &line, 1);
      if (cmyk) cmyk_to_rgb(row.data(), out);
    }
    jpeg_finish_decompress(&cinfo);  // reads up to EOI: a truncated file warns here
    return true;
  }

  void cmyk_to_rgb(const uint8_t* s, uint8_t* rgb) const {
    for (int x = 0; x < width; ++x, s += 4, rgb += 3) {
      for (int c = 0; c < 3; ++c) {
        const unsigned v = adobe ? unsigned(s[c]) * s[3] : unsigned(255 - s[c]) * unsigned(255 - s[3]);
        rgb[c] = uint8_t((v + 127) / 255);
      }
    }
  }
};

JpegDecoder::JpegDecoder() : impl_(std::make_unique<Impl>()) {}
JpegDecoder::~JpegDecoder() = default;

void JpegDecoder::header(const uint8_t* data, size_t size, const std::string& what, int& height, int& width) {
  if (!impl_->run(data, size, nullptr, 0, 0))
    throw DataError(fmt::format("{}: cannot decode JPEG: {}", what, impl_->err.message));
  height = impl_->height, width = impl_->width;
  if (height <= 0 || width <= 0) throw DataError(fmt::format("{}: JPEG has no pixels ({}x{})", what, height, width));
  if (uint64_t(height) * uint64_t(width) > kMaxPixels)
    throw DataError(fmt::format("{}: JPEG is {}x{}, larger than this reader accepts", what, height, width));
}

void JpegDecoder::decode_rgb(const uint8_t* data, size_t size, const std::string& what, uint8_t* rgb, int height,
                             int width) {
  if (!impl_->run(data, size, rgb, height, width))
    throw DataError(fmt::format("{}: cannot decode JPEG: {}", what, impl_->err.message));
  if (impl_->height != height || impl_->width != width)  // nothing was decoded
    throw std::logic_error(fmt::format("{}: decode_rgb asked for {}x{}, file is {}x{}", what, height, width,
                                       impl_->height, impl_->width));
}

}  // namespace trainer
