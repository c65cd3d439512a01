// Bad-input corpus: missing or corrupt data (image folders, CIFAR, IDX), exit 3; data/model mismatches, exit 2.
#pragma once
#include "corpus.h"

namespace bad_inputs {

inline std::vector<Case> data_cases() {
  const std::string png = fixture("rgb4x4.png"), png5 = fixture("rgb5x5.png"), jpg = fixture("bird32x32.jpg");
  const std::vector<File> good_imgs = {{"imgs/a/1.png", png}, {"imgs/a/2.png", png}, {"imgs/b/1.png", png}};
  return {
      // ---- missing or corrupt data ------------------------------------------------------------------
      {.cat = "data", .name = "image folder path missing", .config = kFolderModel, .code = 3,
       .expect = "data error: imgs: no such directory"},
      {.cat = "data", .name = "image folder path is a file", .config = kFolderModel, .files = {{"imgs", "text"}}, .code = 3,
       .expect = "data error: imgs: not a directory"},
      {.cat = "data", .name = "image folder without class folders", .config = kFolderModel, .files = {{"imgs/", ""}}, .code = 3,
       .expect = "data error: imgs: no class subfolders (expected imgs/<class>/<image>.jpg)"},
      {.cat = "data", .name = "empty class folder", .config = kFolderModel, .files = {{"imgs/a/1.png", png}, {"imgs/b/", ""}},
       .code = 3, .expect = "data error: imgs/b: class folder has no .jpg/.jpeg/.png images"},
      {.cat = "data", .name = "text file named .jpg", .config = kFolderModel,
       .files = {{"imgs/a/1.png", png}, {"imgs/b/notes.jpg", "these are my notes\n"}}, .code = 3,
       .expect = "data error: imgs/b/notes.jpg: not a JPEG or PNG file (first bytes ...)"},
      {.cat = "data", .name = "JPEG header then garbage", .config = kFolderModel,
       .files = {{"imgs/a/1.png", png}, {"imgs/b/bad.jpg", "\xff\xd8\xff\xe0 this is not a JPEG"}}, .code = 3,
       .expect = "data error: imgs/b/bad.jpg: cannot decode JPEG: ..."},
      {.cat = "data", .name = "truncated JPEG", .config = kFolderModel,
       .files = {{"imgs/a/1.png", png}, {"imgs/b/cut.jpg", jpg.substr(0, jpg.size() / 2)}}, .code = 3,
       .expect = "data error: imgs/b/cut.jpg: ...JPEG..."},
      {.cat = "data", .name = "corrupt PNG", .config = kFolderModel,
       .files = {{"imgs/a/1.png", png}, {"imgs/b/bad.png", "\x89PNG\r\n\x1a\n truncated"}}, .code = 3,
       .expect = "data error: imgs/b/bad.png: cannot decode PNG: ..."},
      {.cat = "data", .name = "PNG with a broken checksum", .config = kFolderModel,
       .files = {{"imgs/a/1.png", png}, {"imgs/b/crc.png", png.substr(0, 29) + "XXXX" + png.substr(33)}}, .code = 3,
       .expect = "data error: imgs/b/crc.png: cannot decode PNG: ..."},
      {.cat = "data", .name = "empty image file", .config = kFolderModel, .files = {{"imgs/a/1.png", png}, {"imgs/b/0.png", ""}},
       .code = 3, .expect = "data error: imgs/b/0.png: empty file (0 bytes), not an image"},
      {.cat = "data", .name = "images of two sizes", .config = kFolderModel, .files = {{"imgs/a/1.png", png}, {"imgs/b/1.png", png5}},
       .code = 3, .expect = "data error: imgs/b/1.png: image is 5x5 (HxW) but ...set image_size: [H, W] to resize all images"},
      {.cat = "data", .name = "images unlike model.input", .config = changed({{"input: [4, 4, 3]", "input: [8, 8, 3]"}}, kFolderModel),
       .files = good_imgs, .expect = "c.yaml:11:10: this set gives 4x4x3 samples, but model.input is 8x8x3"},
      {.cat = "data", .name = "file list naming a missing file",
       .config = changed({{"path: imgs}", "path: imgs, files: list.txt}"}}, kFolderModel),
       .files = {{"imgs/a.png", png}, {"imgs/list.txt", "a.png 0\nb.png 1\n"}}, .code = 3, .expect = "data error: imgs/b.png: cannot open: No such file or directory"},
      {.cat = "data", .name = "file list line without a label",
       .config = changed({{"path: imgs}", "path: imgs, files: list.txt}"}}, kFolderModel),
       .files = {{"imgs/a.png", png}, {"imgs/list.txt", "a.png 0\nb.png\n"}}, .code = 3,
       .expect = "data error: imgs/list.txt:2: expected '<relative/path> <label>', got 'b.png'"},
      {.cat = "data", .name = "CIFAR folder missing", .config = kCifarModel, .code = 3,
       .expect = "data error: cifar: no such directory (expected the cifar10_bin files data_batch_1.bin, ...)"},
      {.cat = "data", .name = "CIFAR batch file missing", .config = kCifarModel,
       .files = [] { auto f = cifar_folder(); f.pop_back(); return f; }(), .code = 3,
       .expect = "data error: cifar/data_batch_5.bin: cannot open: No such file or directory"},
      {.cat = "data", .name = "truncated CIFAR batch", .config = kCifarModel,
       .files = [] { auto f = cifar_folder(); f[0].bytes.resize(3073 + 100); return f; }(), .code = 3,
       .expect = "data error: cifar/data_batch_1.bin: truncated at byte offset 3173 (records are 3073 bytes; the last is 2973 bytes short)"},
      {.cat = "data", .name = "empty CIFAR batch", .config = kCifarModel,
       .files = [] { auto f = cifar_folder(); f[2].bytes.clear(); return f; }(), .code = 3,
       .expect = "data error: cifar/data_batch_3.bin: empty file"},
      {.cat = "data", .name = "CIFAR label out of range", .config = kCifarModel,
       .files = [] { auto f = cifar_folder(); f[1].bytes[3073] = 12; return f; }(), .code = 3,
       .expect = "data error: cifar/data_batch_2.bin: label 12 at byte offset 3073 is not a CIFAR-10 class (0..9)"},
      {.cat = "data", .name = "IDX with a wrong magic", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x804, 2, 4, 4, 32)}, {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3,
       .expect = "data error: img.idx: not an IDX image file (magic 0x00000804, expected 0x00000803)"},
      {.cat = "data", .name = ".gz that is not gzip", .config = changed({{"img.idx", "img.idx.gz"}}, kMnistModel),
       .files = {{"img.idx.gz", "this is not gzip at all\n"}, {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3,
       .expect = "data error: img.idx.gz: not an IDX image file (magic ...)"},
      {.cat = "data", .name = "corrupt gzip stream", .config = changed({{"img.idx", "img.idx.gz"}}, kMnistModel),
       .files = {{"img.idx.gz", std::string("\x1f\x8b\x08\x00\0\0\0\0\0\x03garbage-after-a-gzip-header", 37)},
                 {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3,
       .expect = "data error: img.idx.gz: read error: invalid block type"},
      {.cat = "data", .name = "truncated IDX images", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 2, 4, 4, 20)}, {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3,
       .expect = "data error: img.idx: truncated at byte offset 36 (header says 2 images of 4x4 = 48 bytes)"},
      {.cat = "data", .name = "IDX image and label counts differ", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 2, 4, 4, 32)}, {"lab.idx", idx_labels(3, "\1\2\3")}}, .code = 3,
       .expect = "data error: img.idx has 2 images but lab.idx has 3 labels"},
      {.cat = "data", .name = "IDX label out of range", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 2, 4, 4, 32)}, {"lab.idx", idx_labels(2, "\1\x0b")}}, .code = 3,
       .expect = "data error: lab.idx: label 11 at byte offset 9 is not below classes (10)"},
      {.cat = "data", .name = "IDX labels missing", .config = kMnistModel, .files = {{"img.idx", idx_images(0x803, 2, 4, 4, 32)}},
       .code = 3, .expect = "data error: lab.idx: cannot open: No such file or directory"},
      {.cat = "data", .name = "unknown dataset type", .config = changed({{"type: synthetic", "type: synthetik"}}),
       .expect = "c.yaml:11:17: 'synthetik' is not a valid type for dataset data.train (did you mean 'synthetic'?); valid: ..."},
      {.cat = "data", .name = "validation split leaves nothing", .config = changed({{"size: 16", "size: 1"}, {"  augment:", "  validation_split: 0.5\n  augment:"}}),
       .code = 3, .expect = "data error: validation_split 0.5 of synthetic: 1 images ...leaves an empty training set"},
      {.cat = "data", .name = "training set smaller than one batch", .config = changed({{"size: 16", "size: 3"}, {"batch_size: 4", "batch_size: 4, drop_last: true"}}),
       .code = 3, .expect = "data error: the training set has 3 samples, fewer than one global batch of 4 (drop_last is on)"},
      {.cat = "data", .name = "missing data section", .config = changed({{"data:\n  train: {type: synthetic, size: 16, image_size: 8, classes: 3}\n  augment: {flip: horizontal}\n", ""}}),
       .expect = "c.yaml:1:1: missing required key 'data' in the config"},
      {.cat = "data", .name = "data.max_image_mb out of range",
       .config = changed({{"  augment: {flip: horizontal}", "  augment: {flip: horizontal}\n  max_image_mb: 0"}}),
       .expect = "c.yaml:13:17: '...max_image_mb' must be between 1 and 768, not 0"},
      // Found by review while adding the safetensors fuzz target: 2^40 x 2^24 elements wrapped to 0
      // in 64 bits and matched an empty byte range, so the shape was accepted.
      {.cat = "data", .name = "safetensors shape whose element count overflows", .config = kBase + "init: {from: w.safetensors}\n",
       .files = {{"w.safetensors", [] {
                    std::string h = R"({"a":{"dtype":"F32","shape":[1099511627776,16777216],"data_offsets":[0,0]}})";
                    h.append((8 - h.size() % 8) % 8, ' ');
                    std::string len(8, '\0');
                    len[0] = char(h.size());
                    return len + h;
                  }()}},
       .code = 3, .expect = "file error: ...w.safetensors: corrupt safetensors file at byte 8: tensor 'a': shape too large"},
      {.cat = "data", .name = "validation folder missing",
       .config = changed({{"path: imgs}", "path: imgs}\n  val: {type: image_folder, path: imgs-val}"}}, kFolderModel),
       .files = good_imgs, .code = 3, .expect = "data error: imgs-val: no such directory"},
  };
}

}  // namespace bad_inputs
