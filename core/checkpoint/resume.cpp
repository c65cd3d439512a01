// Resolving --resume / eval targets to checkpoints.
#include "core/checkpoint/resume.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/io/file.h"

namespace fs = std::filesystem;

namespace trainer {

std::string run_dir_of(const CheckpointInfo& c) {
  fs::path dir = fs::path(c.sidecar).parent_path();
  return (dir.filename() == "checkpoints" ? dir.parent_path() : dir).string();
}

std::string config_of(const std::string& target) {
  std::error_code ec;
  fs::path run = fs::is_directory(target, ec) ? fs::path(target) : fs::path(target).parent_path().parent_path();
  if (!fs::is_directory(target, ec) && !fs::exists(target, ec))
    throw FileError(fmt::format("{}: no such run directory or checkpoint", target));
  fs::path cfg = run / "config.yaml";
  if (!fs::exists(cfg, ec))
    throw FileError(fmt::format("{}: not a run directory or a checkpoint in one (no {})", target, cfg.string()));
  return cfg.string();
}

CheckpointInfo find_checkpoint(const std::string& target, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::exists(target, ec)) throw FileError(fmt::format("{}: no such run directory or checkpoint", target));
  if (!fs::is_directory(target, ec)) return read_checkpoint(target);
  fs::path dir = fs::path(target) / "checkpoints";
  if (!fs::is_directory(dir, ec)) dir = target;
  std::vector<std::string> passed;
  std::optional<CheckpointInfo> c = newest_checkpoint({dir.string()}, "", &passed);
  if (!c) {
    std::string why = passed.empty() ? "" : fmt::format(" ({} invalid: {})", passed.size(), passed.front());
    throw FileError(fmt::format("{}: no valid checkpoint{}", dir.string(), why));
  }
  if (skipped) skipped->insert(skipped->end(), passed.begin(), passed.end());
  return *c;
}

std::optional<CheckpointInfo> find_auto_checkpoint(const std::string& runs_root, const std::string& name,
                                                   const std::string& hash, std::vector<std::string>* skipped) {
  std::error_code ec;
  fs::path base = fs::path(runs_root) / name;
  std::vector<std::string> dirs;
  if (fs::is_directory(base, ec))
    for (const auto& run : fs::directory_iterator(base, ec)) dirs.push_back((run.path() / "checkpoints").string());
  return newest_checkpoint(dirs, hash, skipped);
}

}  // namespace trainer
