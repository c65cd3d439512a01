// image_folder internals: the list of (file, label) a folder tree or a file list gives.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainer::image_folder {

struct Entry {
  std::string path;  // as opened (root joined with the relative path)
  int32_t label;
};

struct Listing {
  std::vector<std::string> classes;  // label -> name
  std::vector<Entry> entries;
};

// True for *.jpg, *.jpeg and *.png in any letter case.
bool is_image_name(const std::string& filename);

// Keras flow_from_directory / torchvision ImageFolder: classes are root's subfolders (sorted by
// name, hidden ones skipped) -> labels 0, 1, ...; images are the image-named files directly in
// each, sorted by name; other files are ignored. DataError for a missing root, no subfolders,
// or a class folder without images. `limit_per_class` keeps the first K files of each class.
// A class folder with 1000 empty image files is a DataError as soon as the scan counts them
// (before the listing grows: a folder of a million empty files fails at once); fewer stay listed
// and are reported, or skipped, in listing order when decoded. The scan is two levels deep and
// never recurses, so a symlink loop cannot keep it going: one that is met is a DataError naming
// it ("Too many levels of symbolic links").
Listing scan_class_folders(const std::string& root, std::optional<int64_t> limit_per_class);

// A file list: one "relative/path label" per line (the path may contain spaces: the label is the
// last field; blank lines and lines starting with # are skipped). Paths are relative to `root`
// (or absolute). A label is a class index (digits) or a class name. With `classes` given, names
// must be among them and indices below their count; without, the classes are the sorted distinct
// names in the list, or, when every label is an index, "0".."max". Entries keep the list's order.
Listing read_file_list(const std::string& root, const std::string& list_path, const std::vector<std::string>& classes,
                       std::optional<int64_t> limit_per_class);

}  // namespace trainer::image_folder
