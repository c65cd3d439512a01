// What `--resume` and `trainer eval` point at — auto, a run directory or a checkpoint file —
// resolved to a checkpoint and the config it was trained with.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"

namespace trainer {

// The run directory a checkpoint belongs to (the parent of its checkpoints/ folder).
std::string run_dir_of(const CheckpointInfo& c);
// The config a run directory or checkpoint was trained with (RUN_DIR/config.yaml); FileError
// when `target` is neither a run directory nor a checkpoint of one.
std::string config_of(const std::string& target);
// A run directory (its newest valid checkpoint, by training position) or a checkpoint file
// (.safetensors or .json). FileError (exit 3) when there is no valid checkpoint, naming an invalid
// one; invalid ones passed over for an older valid one are described in `skipped`.
CheckpointInfo find_checkpoint(const std::string& target, std::vector<std::string>* skipped = nullptr);
// Keras BackupAndRestore: the valid checkpoint furthest in training of every run of this config
// (same name and config hash) under runs_root/name/; nullopt when there is none.
std::optional<CheckpointInfo> find_auto_checkpoint(const std::string& runs_root, const std::string& name,
                                                   const std::string& hash, std::vector<std::string>* skipped = nullptr);

}  // namespace trainer
