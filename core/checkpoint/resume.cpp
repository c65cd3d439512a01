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

CheckpointInfo find_checkpoint(const std::string& target) {
  std::error_code ec;
  if (!fs::exists(target, ec)) throw FileError(fmt::format("{}: no such run directory or checkpoint", target));
  if (!fs::is_directory(target, ec)) return read_checkpoint(target);
  fs::path dir = fs::path(target) / "checkpoints";
  if (!fs::is_directory(dir, ec)) dir = target;
  std::vector<std::string> skipped;
  std::vector<CheckpointInfo> all = list_checkpoints(dir.string(), &skipped);
  if (all.empty()) {
    std::string why = skipped.empty() ? "" : fmt::format(" ({} invalid: {})", skipped.size(), skipped.front());
    throw FileError(fmt::format("{}: no valid checkpoint{}", dir.string(), why));
  }
  return all.front();
}

std::optional<CheckpointInfo> find_auto_checkpoint(const std::string& runs_root, const std::string& name,
                                                   const std::string& hash) {
  std::error_code ec;
  fs::path base = fs::path(runs_root) / name;
  std::optional<CheckpointInfo> best;
  fs::file_time_type best_time;
  if (!fs::is_directory(base, ec)) return best;
  for (const auto& run : fs::directory_iterator(base, ec)) {
    for (const CheckpointInfo& c : list_checkpoints((run.path() / "checkpoints").string())) {
      if (c.state.config_hash != hash) continue;
      fs::file_time_type t = fs::last_write_time(c.sidecar, ec);
      if (!best || t > best_time || (t == best_time && c.state.global_step > best->state.global_step)) {
        best = c;
        best_time = t;
      }
    }
  }
  return best;
}

}  // namespace trainer
