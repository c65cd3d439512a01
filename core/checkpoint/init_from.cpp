// Loading weights by name for fine-tuning.
#include "core/checkpoint/init_from.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/io/safetensors.h"

namespace fs = std::filesystem;

namespace trainer {
namespace {

std::string first_few(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 4; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 4) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

}  // namespace

InitSpec read_init_spec(const cfg::Node& section) {
  InitSpec i;
  i.node = section;
  if (!section.defined()) return i;
  cfg::MapReader r(section, "the init section");
  i.from = r.get<std::string>("from");
  i.skip_mismatch = r.get<bool>("skip_mismatch", false);
  r.finish();
  return i;
}

std::vector<std::string> init_from(const InitSpec& o, const std::string& base_dir, ModelState& ps) {
  fs::path path = o.from;
  if (path.is_relative()) path = fs::path(base_dir) / path;
  cfg::Node where = o.node.child("from");
  std::error_code ec;
  if (!fs::exists(path, ec)) where.fail(fmt::format("no such file: {}", path.string()));
  if (fs::is_directory(path, ec)) where.fail(fmt::format("{} is a directory; give a .safetensors file", path.string()));
  SafeTensorsReader st(path.string());
  std::vector<float> w = ps.download_weights();
  std::vector<std::string> missing, mismatched;
  int loaded = 0;
  for (const ParamEntry& p : ps.entries()) {
    const SafeTensor* t = st.find(p.name);
    if (!t) {
      missing.push_back(p.name);
      continue;
    }
    if (t->dtype != "F32" || t->shape != p.spec.shape.dims()) {
      mismatched.push_back(fmt::format("{} {} in the file, {} in the model", p.name,
                                       t->dtype == "F32" ? Shape(t->shape).str() : t->dtype, p.spec.shape.str()));
      continue;
    }
    std::vector<float> v = st.f32(p.name);
    std::copy(v.begin(), v.end(), w.begin() + p.offset);
    ++loaded;
  }
  if (!mismatched.empty() && !o.skip_mismatch)
    where.fail(fmt::format("{} parameter(s) differ in shape: {} (set init.skip_mismatch: true to keep their initial values)",
                           mismatched.size(), first_few(mismatched)));
  if (loaded == 0) where.fail(fmt::format("{} holds none of the model's parameters (e.g. {})", path.string(), ps.entries().front().name));
  ps.upload_weights(w);
  std::vector<std::string> lines{fmt::format("Initialised {} of {} parameters from {}", loaded, ps.entries().size(), path.string())};
  if (!missing.empty()) lines.push_back(fmt::format("  not in the file (initial values kept): {}", first_few(missing)));
  if (!mismatched.empty()) lines.push_back(fmt::format("  skipped for their shape: {}", first_few(mismatched)));
  return lines;
}

}  // namespace trainer
