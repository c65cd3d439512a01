// Bad-input cases: special files where a reader expects a regular one (a FIFO, /dev/zero) and names
// holding a newline or a quote; each must end at once with one line naming the path.
#pragma once
#include <string>
#include <vector>

#include "checkpoint_cases.h"
#include "corpus.h"
#include "hostile_files_cases.h"

namespace bad_inputs {

inline std::vector<Case> special_files_cases() {
  const GoodRun& g = good_run();
  const std::string js = "r/checkpoints/epoch-0001.json";
  const std::vector<File> one_good = {{"imgs/b/1.png", fixture("rgb4x4.png")}};
  const std::string listed = changed({{"path: imgs}", "path: imgs, files: list.txt}"}}, kFolderModel);
  // `all` with `f` in place of the file of its path (or added).
  auto with = [](std::vector<File> all, const File& f) {
    std::erase_if(all, [&](const File& a) { return a.path == f.path; });
    all.push_back(f);
    return all;
  };
  return {
      // ---- a FIFO or /dev/zero where a regular file belongs (core/io/file.h InputFile) ----
      {.cat = "special file", .name = "config is a FIFO no program writes to", .files = {fifo("c.yaml")},
       .expect = "c.yaml: cannot read the config: is a FIFO that no program writes to (nothing to read)"},
      {.cat = "special file", .name = "image named a.png that is a FIFO", .config = kFolderModel, .files = with(one_good, fifo("imgs/a/a.png")),
       .code = 3, .expect = "data error: imgs/a/a.png: is a FIFO, not a regular file"},
      {.cat = "special file", .name = "files: list that is /dev/zero", .config = listed,
       .files = {{"imgs/a.png", fixture("rgb4x4.png")}, symlink_to("imgs/list.txt", "/dev/zero")}, .code = 3,
       .expect = "data error: imgs/list.txt: is a character device, not a regular file"},
      {.cat = "special file", .name = "files: list naming a FIFO", .config = listed,
       .files = {{"imgs/a.png", fixture("rgb4x4.png")}, fifo("imgs/b.png"), {"imgs/list.txt", "a.png 0\nb.png 1\n"}}, .code = 3,
       .expect = "data error: imgs/b.png: is a FIFO, not a regular file"},
      {.cat = "special file", .name = "CIFAR batch linked to /dev/zero", .config = kCifarModel,
       .files = with(cifar_folder(), symlink_to("cifar/data_batch_1.bin", "/dev/zero")), .code = 3,
       .expect = "data error: cifar/data_batch_1.bin: is a character device, not a regular file"},
      {.cat = "special file", .name = "CIFAR class names that are a FIFO", .config = kCifarModel,
       .files = with(cifar_folder(), fifo("cifar/batches.meta.txt")), .code = 3,
       .expect = "data error: cifar/batches.meta.txt: is a FIFO, not a regular file"},
      {.cat = "special file", .name = "IDX images linked to /dev/zero", .config = kMnistModel,
       .files = {symlink_to("img.idx", "/dev/zero"), {"lab.idx", idx_labels(2, "\1\2")}}, .code = 3,
       .expect = "data error: img.idx: is a character device, not a regular file"},
      {.cat = "special file", .name = "IDX labels that are a FIFO", .config = kMnistModel,
       .files = {{"img.idx", idx_images(0x803, 2, 4, 4, 32)}, fifo("lab.idx")}, .code = 3,
       .expect = "data error: lab.idx: is a FIFO, not a regular file"},
      {.cat = "special file", .name = "x.npy linked to /dev/zero", .config = kNpyModel,
       .files = {symlink_to("x.npy", "/dev/zero"), {"y.npy", npy_declaring("(16,)", 128, "<i8")}}, .code = 3,
       .expect = "data error: x.npy: is a character device, not a regular file"},
      {.cat = "special file", .name = "init.from safetensors linked to /dev/zero", .config = kInitModel,
       .files = {symlink_to("w.safetensors", "/dev/zero")}, .code = 3,
       .expect = "file error: ./w.safetensors: is a character device, not a regular file"},
      {.cat = "special file", .name = "resume: sidecar that is a FIFO", .files = with(run_dir(g.weights, ""), fifo(js)), .args = "run --resume " + js, .code = 3, .expect = "file error: " + js + ": is a FIFO, not a regular file"},
      {.cat = "special file", .name = "resume: run config that is a FIFO", .files = with(run_dir(g.weights, g.sidecar), fifo("r/config.yaml")), .args = "run --resume r", .expect = "r/config.yaml: cannot read the config: is a FIFO that no program writes to (nothing to read)"},

      // ---- names that would split a message over lines (core/io/printable.h) ----
      {.cat = "special file", .name = "corrupt image whose name holds a newline", .config = kFolderModel,
       .files = with(one_good, {"imgs/a/x\ny.png", "not an image"}), .code = 3,
       .expect = "data error: imgs/a/x\\ny.png: not a JPEG or PNG file (first bytes 6e 6f 74 20 61 6e 20 69)"},
      {.cat = "special file", .name = "config name with a newline, a tab and a quote", .args = "run \"$(printf 'c\\n\\t')\\\".yaml\"",
       .expect = "c\\n\\t\".yaml: cannot open the config file: No such file or directory"},
      {.cat = "special file", .name = "config name that is not UTF-8", .args = "run \"$(printf 'c\\377.yaml')\"",
       .expect = "c\\xff.yaml: cannot open the config file: No such file or directory"},
  };
}

}  // namespace bad_inputs
