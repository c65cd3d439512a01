// Bad-input cases: .npy arrays, safetensors files, images, IDX/CIFAR records and --set values
// that lie about themselves (sizes, types, offsets, nesting), beyond the ordinary data cases.
#pragma once
#include <string>
#include <vector>

#include "corpus.h"
#include "hostile_cases.h"

namespace bad_inputs {

const std::string kNpyModel = changed({{"  train: {type: synthetic, size: 16, image_size: 8, classes: 3}",
                                        "  train: {type: npy, x: x.npy, labels: y.npy}"},
                                       {"  augment: {flip: horizontal}\n", ""}});
const std::string kInitModel = kBase + "init: {from: w.safetensors}\n";

// x.npy of 16 float32 8x8x3 images (or `x` as given) and y.npy of 16 int64 labels 0.
inline std::vector<File> npy_files(const std::string& x, const std::string& y = npy_declaring("(16,)", 128, "<i8")) {
  return {{"x.npy", x}, {"y.npy", y}};
}
inline std::string good_x() { return npy_declaring("(16, 8, 8, 3)", 16 * 192 * 4); }

// A PNG (8-bit RGB) whose IHDR says width x height, with one empty IDAT.
inline std::string png_of(uint32_t width, uint32_t height, char depth = 8, char color = 2);

inline std::vector<Case> hostile_files_cases() {
  const std::string img = "imgs/a/1.png";
  const std::vector<File> one_good = {{"imgs/b/1.png", fixture("rgb4x4.png")}};
  auto folder = [&](const std::string& name, const std::string& bytes) {
    std::vector<File> f = one_good;
    f.push_back({name, bytes});
    return f;
  };
  return {
      // ---- .npy (core/data/npy_format.cpp) ----
      {.cat = "npy", .name = "x.npy missing", .config = kNpyModel, .files = {{"y.npy", npy_declaring("(16,)", 128, "<i8")}}, .code = 3, .expect = "data error: x.npy: cannot open: No such file or directory"},
      {.cat = "npy", .name = "x.npy is text", .config = kNpyModel, .files = npy_files("x = [1, 2, 3]\n"), .code = 3, .expect = "data error: x.npy: byte 0: no \\x93NUMPY magic (not a .npy file)"},
      {.cat = "npy", .name = "x.npy is empty", .config = kNpyModel, .files = npy_files(""), .code = 3, .expect = "data error: x.npy: byte 0: the file is empty (not a .npy file)"},
      {.cat = "npy", .name = "x.npy is a folder", .config = kNpyModel, .files = {{"x.npy/", ""}, {"y.npy", npy_declaring("(16,)", 128, "<i8")}}, .code = 3, .expect = "data error: x.npy: is a directory, not a regular file"},
      {.cat = "npy", .name = "format version 9", .config = kNpyModel, .files = npy_files(std::string("\x93NUMPY\x09\x00", 8) + good_x().substr(8)), .code = 3, .expect = "data error: x.npy: byte 6: format version 9.0 is not 1.0, 2.0 or 3.0"},
      {.cat = "npy", .name = "header length past the end", .config = kNpyModel, .files = npy_files(std::string("\x93NUMPY\x01\x00\xff\xff", 10) + "{'descr'"), .code = 3, .expect = "data error: x.npy: byte 8: header length 65535 runs past the end of the 18-byte file"},
      {.cat = "npy", .name = "header is not a dict", .config = kNpyModel, .files = npy_files(std::string("\x93NUMPY\x01\x00\x76\x00", 10) + std::string(117, ' ') + "\n"), .code = 3, .expect = "data error: x.npy: byte 128: expected '{', found the end of the header"},
      {.cat = "npy", .name = "complex dtype", .config = kNpyModel, .files = npy_files(npy_declaring("(16, 8, 8, 3)", 16 * 192 * 8, "<c8")), .code = 3, .expect = "data error: x.npy: dtype '<c8' is not supported (use '<f4', '<f8', '|u1', '<i4' or '<i8')"},
      {.cat = "npy", .name = "object dtype", .config = kNpyModel, .files = npy_files(npy_declaring("(16, 8, 8, 3)", 64, "|O")), .code = 3, .expect = "data error: x.npy: dtype '|O' is not supported (use '<f4', '<f8', '|u1', '<i4' or '<i8')"},
      {.cat = "npy", .name = "negative dimension", .config = kNpyModel, .files = npy_files(npy_declaring("(-16, 8, 8, 3)", 64)), .code = 3, .expect = "data error: x.npy: byte 61: expected a dimension, found '-'"},
      {.cat = "npy", .name = "truncated data", .config = kNpyModel, .files = npy_files(npy_declaring("(16, 8, 8, 3)", 1000)), .code = 3, .expect = "data error: x.npy: the header says 16x8x8x3 float32 values (12288 bytes from byte 128), the file has 1000"},
      {.cat = "npy", .name = "trailing bytes", .config = kNpyModel, .files = npy_files(good_x() + "xx"), .code = 3, .expect = "data error: x.npy: the header says 16x8x8x3 float32 values (12288 bytes from byte 128), the file has 12290"},
      {.cat = "npy", .name = "samples unlike model.input", .config = kNpyModel, .files = npy_files(npy_declaring("(16, 4, 4, 3)", 16 * 48 * 4)),
       .expect = "c.yaml:11:10: this set gives 1 input(s) of shape 4x4x3, but the model takes 1 input(s) of shape 8x8x3"},
      {.cat = "npy", .name = "labels count differs", .config = kNpyModel, .files = npy_files(good_x(), npy_declaring("(15,)", 120, "<i8")), .code = 3, .expect = "data error: y.npy: 15 labels, x.npy has 16 samples"},
      {.cat = "npy", .name = "labels of rank 3", .config = kNpyModel, .files = npy_files(good_x(), npy_declaring("(16, 2, 1)", 256, "<i8")), .code = 3, .expect = "data error: y.npy: labels must be an array [N] or [N, 1] (or [N, T]: a label per position), not of shape (16, 2, 1)"},
      {.cat = "npy", .name = "float labels", .config = kNpyModel, .files = npy_files(good_x(), npy_declaring("(16,)", 64, "<f4")), .code = 3, .expect = "data error: y.npy: dtype '<f4' is not supported (use '|u1', '<i4' or '<i8')"},

      // ---- safetensors through init.from (core/io/safetensors.cpp) ----
      {.cat = "safetensors", .name = "empty file", .config = kInitModel, .files = {{"w.safetensors", ""}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 0: only 0 bytes, less than the 8-byte header length"},
      {.cat = "safetensors", .name = "7 bytes", .config = kInitModel, .files = {{"w.safetensors", "1234567"}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 0: only 7 bytes, less than the 8-byte header length"},
      {.cat = "safetensors", .name = "header length 0", .config = kInitModel, .files = {{"w.safetensors", std::string(8, '\0')}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: the header is not valid JSON"},
      {.cat = "safetensors", .name = "header is a JSON list", .config = kInitModel, .files = {{"w.safetensors", safetensors("[1, 2]", 0)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: the header is not a JSON object"},
      {.cat = "safetensors", .name = "unknown dtype", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: tensor 'a': unknown dtype"},
      {.cat = "safetensors", .name = "offsets reversed", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: tensor 'a': bytes [16, 0) lie outside the data section of 16 bytes: truncated?"},
      {.cat = "safetensors", .name = "shape and byte range disagree", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: tensor 'a': 16 bytes do not hold a F32 tensor of 5 elements"},
      {.cat = "safetensors", .name = "negative dimension", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: tensor 'a': shape holds something other than sizes"},
      {.cat = "safetensors", .name = "offsets as strings", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":["0","16"]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: tensor 'a': data_offsets is not [begin, end]"},
      {.cat = "safetensors", .name = "metadata that is not strings", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"__metadata__":{"a":[1]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: __metadata__ 'a' is not a string (the format allows only strings there)"},
      {.cat = "safetensors", .name = "a number past double's range (safetensors_fuzz's find)", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":5e555,"shape":[4],"data_offsets":[0,16]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: the header holds a number too large for a double"},
      {.cat = "safetensors", .name = "a tensor without offsets", .config = kInitModel, .files = {{"w.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[4]}})", 16)}}, .code = 3, .expect = "file error: ./w.safetensors: corrupt safetensors file at byte 8: tensor 'a': needs dtype, shape and data_offsets"},

      // ---- images (core/data/image*.cpp) ----
      {.cat = "image", .name = "PNG declaring 0 x 0", .config = kFolderModel, .files = folder(img, png_of(0, 0)), .code = 3, .expect = "data error: imgs/a/1.png: cannot decode PNG: invalid size 0x0"},
      {.cat = "image", .name = "PNG declaring a bit depth of 7", .config = kFolderModel, .files = folder(img, png_of(4, 4, 7)), .code = 3, .expect = "data error: imgs/a/1.png: cannot decode PNG: Invalid IHDR data"},
      {.cat = "image", .name = "PNG declaring colour type 5", .config = kFolderModel, .files = folder(img, png_of(4, 4, 8, 5)), .code = 3, .expect = "data error: imgs/a/1.png: cannot decode PNG: Invalid IHDR data"},
      {.cat = "image", .name = "PNG without pixels", .config = kFolderModel, .files = folder(img, png_of(4, 4)), .code = 3, .expect = "data error: imgs/a/1.png: cannot decode PNG: Not enough image data"},
      {.cat = "image", .name = "PNG declaring a 1 GiB text chunk (png_fuzz's find)", .config = kFolderModel,
       .files = folder(img, std::string("\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x04\x00\x00\x00\x04\x08\x02\x00\x00\x00\x26\x93\x09\x29\x40\x00\x00\x0c\x74\x45\x58\x74\x43\x6f\x6d\x6d\x65\x6e\x74\x00\x73\x65\x65\x64\xcb\x99\x4d\x72\x97\x00\x0b\x30\x89\x50\x4e\x47\x0d\x0a\x00", 68)), .code = 3,
       .expect = "data error: imgs/a/1.png: cannot decode PNG: the chunk at byte 33 declares 1073741836 bytes, past the end of the 68-byte file"},
      {.cat = "image", .name = "GIF named .png", .config = kFolderModel, .files = folder(img, std::string("GIF89a\x04\x00\x04\x00\x80\x00\x00", 13)), .code = 3, .expect = "data error: imgs/a/1.png: not a JPEG or PNG file (first bytes 47 49 46 38 39 61 04 00)"},
      {.cat = "image", .name = "JPEG declaring a height of 0", .config = kFolderModel, .files = folder("imgs/a/1.jpg", [] {
         std::string j = fixture("bird32x32.jpg");
         for (size_t i = 2; i + 9 < j.size(); ++i)
           if (uint8_t(j[i]) == 0xff && (uint8_t(j[i + 1]) == 0xc0 || uint8_t(j[i + 1]) == 0xc2)) { j[i + 5] = 0, j[i + 6] = 0; break; }
         return j;
       }()), .code = 3, .expect = "data error: imgs/a/1.jpg: cannot decode JPEG: Empty JPEG image (DNL not supported)"},
      {.cat = "image", .name = "JPEG of only its start marker", .config = kFolderModel, .files = folder("imgs/a/1.jpg", "\xff\xd8"), .code = 3, .expect = "data error: imgs/a/1.jpg: not a JPEG or PNG file (first bytes ff d8)"},

      // ---- IDX and CIFAR records ----
      {.cat = "records", .name = "IDX declaring 2^31 images", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 0x80000000u, 4, 4, 32)}, {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3, .expect = "data error: img.idx: truncated at byte offset 48 (header says 2147483648 images of 4x4 = 34359738384 bytes)"},
      {.cat = "records", .name = "IDX images of 0 rows", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 2, 0, 4, 0)}, {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3, .expect = "data error: img.idx: implausible image size 0x4"},
      {.cat = "records", .name = "IDX labels declaring 2^32-1", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 2, 4, 4, 32)}, {"lab.idx", idx_labels(0xffffffffu, "\1\2")}}, .code = 3, .expect = "data error: img.idx has 2 images but lab.idx has 4294967295 labels"},
      {.cat = "records", .name = "IDX of float pixels", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0xd03, 2, 4, 4, 128)}, {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3, .expect = "data error: img.idx: not an IDX image file (magic 0x00000d03, expected 0x00000803)"},
      {.cat = "records", .name = "CIFAR batch that is a folder", .config = kCifarModel, .files = [] {
         std::vector<File> f = cifar_folder();
         f[0] = {"cifar/data_batch_1.bin/", ""};
         return f;
       }(), .code = 3, .expect = "data error: cifar/data_batch_1.bin: is a directory, not a regular file"},
      {.cat = "records", .name = "CIFAR label 255", .config = kCifarModel, .files = cifar_folder(2, char(255)), .code = 3, .expect = "data error: cifar/data_batch_1.bin: label 255 at byte offset 0 is not a CIFAR-10 class (0..9)"},

      // ---- --set values built to hurt ----
      {.cat = "set", .name = "a key of 200 components", .config = kBase, .args = "run c.yaml --set " + [] {
         std::string k = "a";
         for (int i = 0; i < 199; ++i) k += ".a";
         return k + "=1";
       }(), .expect = "--set a.a...a.a=1: unknown key 'a' in the config"},
      {.cat = "set", .name = "a value nested 100 deep", .config = kBase, .args = "run c.yaml --set 'x=" + std::string(100, '[') + std::string(100, ']') + "'", .expect = "--set x=[[...]]: lists and maps nest more than 64 deep here; a config is not that deep"},
      {.cat = "set", .name = "an undefined alias", .config = kBase, .args = "run c.yaml --set 'train.epochs=*nope'", .expect = "--set train.epochs=*nope: cannot parse the value as YAML: the referenced anchor is not defined"},
      {.cat = "set", .name = "a repeated key in a mapping value", .config = kBase, .args = "run c.yaml --set 'train={epochs: 1, epochs: 2}'", .expect = "--set train={epochs: 1, epochs: 2}: duplicate key 'epochs' in the value"},
      {.cat = "set", .name = "a control byte in the value", .config = kBase, .args = "run c.yaml --set \"name=$(printf 'a\\tb')\"", .expect = "--set name=a\\tb: 'a\\tb' is not a valid run name..."},

      // ---- more configs that expand ----
      {.cat = "bomb", .name = "maps nested 65 deep", .config = kBase + "deep: " + [] {
         std::string s;
         for (int i = 0; i < 65; ++i) s += "{a: ";
         return s + "1" + std::string(65, '}');
       }() + "\n", .expect = "c.yaml:17:260: lists and maps nest more than 64 deep here; a config is not that deep"},
      {.cat = "bomb", .name = "alias bomb of maps", .config = [] {
         std::string t = kBase + "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}\n";
         for (int i = 1; i < 8; ++i) {
           std::string prev = "*m" + std::to_string(i - 1);
           t += "m" + std::to_string(i) + ": &m" + std::to_string(i) + " {a: " + prev + ", b: " + prev + ", c: " + prev + ", d: " + prev +
                ", e: " + prev + ", f: " + prev + ", g: " + prev + ", h: " + prev + ", i: " + prev + "}\n";
         }
         return t;
       }(), .expect = "c.yaml:21:5: this value expands to 132,859 values (aliases count at each use); a config may hold at most 100,000"},
      {.cat = "bomb", .name = "alias bomb as layers", .config = with_model(
         "model:\n  input: [4]\n  layers:\n    - &l {type: dense, units: 2}\n    - &l1 [*l, *l, *l, *l, *l, *l, *l, *l, *l, *l]\n"
         "    - &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]\n    - &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]\n"
         "    - &l4 [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3]\n    - [*l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4]\n"), .expect = "c.yaml:10:7: this value expands to 511,111 values (aliases count at each use); a config may hold at most 100,000"},
      {.cat = "bomb", .name = "10,001 layers", .config = [] {
         std::string m = "model:\n  input: [4]\n  layers:\n";
         for (int i = 0; i < 10001; ++i) m += "    - {type: dense, units: 2}\n";
         return with_model(m);
       }(), .expect = "c.yaml:10005:7: the model expands to more than 10000 layers here (blocks inside blocks multiply); a model may have at most 10000"},
      {.cat = "bomb", .name = "an undefined alias", .config = kBase + "x: *nope\n", .expect = "c.yaml:17:4: the referenced anchor is not defined"},
  };
}

inline std::string png_of(uint32_t width, uint32_t height, char depth, char color) {
  auto chunk = [](const std::string& kind, const std::string& body) {
    std::string kb = kind + body;
    uint32_t crc = 0xffffffffu;  // CRC-32 as PNG defines it
    for (unsigned char c : kb) {
      crc ^= c;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return be32(uint32_t(body.size())) + kb + be32(crc ^ 0xffffffffu);
  };
  const std::string ihdr = be32(width) + be32(height) + std::string(1, depth) + std::string(1, color) + std::string(3, '\0');
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", "") + chunk("IEND", "");
}

}  // namespace bad_inputs
