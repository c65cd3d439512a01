// RecordedStep and run_recorded: a step's work recorded once (a CUDA graph) and replayed — how each
// call runs it (as launched, a kind's first, recorded, replayed), shared by a replica's program and
// a pipeline stage's.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/ops/context.h"

namespace trainer {

// One kind of step's recording on one context (a batch size, a micro-batch kind).
struct RecordedStep {
  bool warm = false;                    // ran as launched once: its plans, choices and scratch exist
  std::unique_ptr<CapturedWork> work;   // the recording, once made
  uint64_t released_at = 0;             // the context's released_blocks() when recorded
  uint64_t warm_at = 0;                 // the context's released_blocks() after its last launched run
};

struct RecordHooks {
  // Several ranks: the least value any rank offers (the mode, then the recording's success), so
  // that all run alike (null: this context's step meets no other rank's recording).
  std::function<int(int)> least;
  // Undoes what a capture that failed part-way left begun (a started collective's join), before
  // the capture is dropped.
  std::function<void()> abandon;
};

// Runs `work` as `r`'s program: launched on its first call (plans, algorithm choices and scratch
// come with it, and NCCL's connections, which it makes lazily and a capture cannot), recorded as
// one CUDA graph on its second, replayed after; launched throughout where nothing can be recorded
// (`record` false, a context that cannot capture) or a recording of its family failed
// (`failed_before`, set then and kept: a note line says why). A block handed back to the context
// since the recording (an arena, scratch or buffer grown elsewhere) makes the next call launched
// and record again; so does one handed back between a kind's launched call and its recording
// (another kind's launched step made a buffer of another shape — a dropout mask of its batch
// size — that this kind would make again inside the capture, where nothing may allocate).
// Returns whether the recording was replayed (the recording call's too: it replays what it
// recorded).
bool run_recorded(OpContext& ctx, RecordedStep& r, bool record, std::string& failed_before,
                  const std::function<void()>& work, const RecordHooks& hooks = {});

}  // namespace trainer
