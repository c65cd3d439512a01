// image_folder listings: class subfolders (ImageFolder layout) or a "path label" file list.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "core/data/dataset.h"
#include "core/data/image_folder.h"
#include "core/data/util.h"
#include "core/io/config.h"

namespace fs = std::filesystem;

namespace trainer::image_folder {

// Empty image files in one class folder at which the listing stops (a broken copy, not a few bad files).
constexpr int64_t kMaxEmptyFiles = 1000;

bool is_image_name(const std::string& filename) {
  std::string ext = fs::path(filename).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

Listing scan_class_folders(const std::string& root, std::optional<int64_t> limit_per_class) {
  Listing l;
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    if (ec) throw DataError(fmt::format("{}: cannot open: {}", root, ec.message()));  // a symlink loop, no access
    throw DataError(fmt::format("{}: no such directory", root));
  }
  if (!fs::is_directory(root, ec)) throw DataError(fmt::format("{}: not a directory", root));
  try {
    for (const auto& e : fs::directory_iterator(root)) {
      std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && e.is_directory()) l.classes.push_back(name);
    }
    std::sort(l.classes.begin(), l.classes.end());
    if (l.classes.empty())
      throw DataError(fmt::format("{}: no class subfolders (expected {}/<class>/<image>.jpg)", root, root));
    for (size_t c = 0; c < l.classes.size(); ++c) {
      std::string dir = (fs::path(root) / l.classes[c]).string();
      std::vector<std::string> files;
      int64_t empty = 0;
      std::string first_empty;
      for (const auto& e : fs::directory_iterator(dir)) {
        std::string name = e.path().filename().string();
        if (!is_image_name(name) || name[0] == '.' || e.is_directory()) continue;
        // A folder of empty files (a failed copy, or a million of them) stops the listing early;
        // a few stay listed and are reported (or skipped) in listing order like other bad files.
        if (e.is_regular_file() && e.file_size() == 0 && ++empty == 1) first_empty = e.path().string();
        if (empty == kMaxEmptyFiles)
          throw DataError(fmt::format("{}: empty file (0 bytes), not an image ({} empty image files in {}: "
                                      "listing stopped)", first_empty, empty, dir));
        files.push_back(name);
      }
      if (files.empty()) throw DataError(fmt::format("{}: class folder has no .jpg/.jpeg/.png images", dir));
      std::sort(files.begin(), files.end());
      if (limit_per_class && int64_t(files.size()) > *limit_per_class) files.resize(size_t(*limit_per_class));
      for (const auto& f : files) l.entries.push_back({(fs::path(dir) / f).string(), int32_t(c)});
    }
  } catch (const fs::filesystem_error& e) {
    throw DataError(fmt::format("{}: {}", e.path1().string(), e.code().message()));
  }
  return l;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

struct Line {
  int number;
  std::string path, label;
};

}  // namespace

Listing read_file_list(const std::string& root, const std::string& list_path, const std::vector<std::string>& classes,
                       std::optional<int64_t> limit_per_class) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw DataError(fmt::format("{}: no such directory", root));
  std::vector<uint8_t> bytes = data_util::read_file(list_path);
  std::vector<Line> lines;
  std::string text(bytes.begin(), bytes.end());
  size_t pos = 0;
  for (int number = 1; pos < text.size(); ++number) {
    size_t nl = text.find('\n', pos);
    std::string raw = trim(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (raw.empty() || raw[0] == '#') continue;
    size_t split = raw.find_last_of(" \t");
    if (split == std::string::npos)
      throw DataError(fmt::format("{}:{}: expected '<relative/path> <label>', got '{}'", list_path, number, raw));
    lines.push_back({number, trim(raw.substr(0, split)), raw.substr(split + 1)});
  }
  if (lines.empty()) throw DataError(fmt::format("{}: no entries (expected lines '<relative/path> <label>')", list_path));

  Listing l;
  l.classes = classes;
  bool names = false, numbers = false;
  int64_t max_index = -1;
  for (const Line& ln : lines) {
    if (all_digits(ln.label)) {
      numbers = true;
      max_index = std::max<int64_t>(max_index, ln.label.size() > 9 ? INT32_MAX : std::stoll(ln.label));
    } else {
      names = true;
    }
  }
  if (l.classes.empty()) {
    if (names && numbers)
      throw DataError(fmt::format("{}: mixes class indices and class names; give the dataset's classes: [...] to "
                                  "say which name each index is", list_path));
    if (names) {
      std::set<std::string> distinct;
      for (const Line& ln : lines) distinct.insert(ln.label);
      l.classes.assign(distinct.begin(), distinct.end());
    } else {
      if (max_index >= 65536)
        throw DataError(fmt::format("{}: class index {} is implausibly large (give classes: [...])", list_path, max_index));
      for (int64_t i = 0; i <= max_index; ++i) l.classes.push_back(std::to_string(i));
    }
  }
  std::map<std::string, int32_t> index;
  for (size_t c = 0; c < l.classes.size(); ++c) index[l.classes[c]] = int32_t(c);
  std::vector<int64_t> per_class(l.classes.size(), 0);
  for (const Line& ln : lines) {
    int32_t label = -1;
    if (auto it = index.find(ln.label); it != index.end()) {
      label = it->second;  // a name (also a listed class whose name is digits)
    } else if (all_digits(ln.label)) {
      if (ln.label.size() > 9 || std::stoll(ln.label) >= int64_t(l.classes.size()))
        throw DataError(fmt::format("{}:{}: class index {} is not below the number of classes ({})", list_path,
                                    ln.number, ln.label, l.classes.size()));
      label = int32_t(std::stoll(ln.label));
    } else {
      throw DataError(fmt::format("{}:{}: unknown class '{}'{}", list_path, ln.number, ln.label,
                                  cfg::suggestion(ln.label, l.classes)));
    }
    if (limit_per_class && per_class[size_t(label)] >= *limit_per_class) continue;
    ++per_class[size_t(label)];
    l.entries.push_back({data_util::resolve_path(root, ln.path), label});
  }
  return l;
}

}  // namespace trainer::image_folder
