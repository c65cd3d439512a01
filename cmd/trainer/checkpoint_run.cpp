// The checkpoint and config of the commands that read a run (eval, predict, export, generate).
#include "cmd/trainer/checkpoint_run.h"

#include <fmt/format.h>

#include "core/checkpoint/resume.h"

namespace trainer::cli {

CheckpointRun open_checkpoint_run(const std::string& target, const std::string& config,
                                  const std::vector<std::string>& sets) {
  std::vector<std::string> skipped;
  CheckpointRun r;
  r.checkpoint = find_checkpoint(target, &skipped);
  for (const std::string& s : skipped) fmt::print(stderr, "warning: passed over an invalid checkpoint: {}\n", s);
  r.spec = load_run_spec(config.empty() ? config_of(run_dir_of(r.checkpoint)) : config, sets);
  return r;
}

}  // namespace trainer::cli
