// How a recorded step runs each time: launched, a kind's first, recorded (capture, verdict), replayed.
#include "core/runtime/recorded_step.h"

#include <cstdio>

namespace trainer {

bool run_recorded(OpContext& ctx, RecordedStep& r, bool record, std::string& failed_before,
                  const std::function<void()>& work, const RecordHooks& hooks) {
  // A block handed back since the recording may be one the recording uses: run as launched once
  // more, then record again.
  if (r.work && ctx.released_blocks() != r.released_at) {
    r.work.reset();
    r.warm = false;
  }
  // How this step runs: as launched (nothing can be recorded), launched as a kind's first,
  // recorded, or its recording replayed — with several ranks, the least any rank can (the order of
  // Mode), so that all do the same.
  // A kind whose launched call is older than a block handed back (another kind's launched step
  // made a buffer of its own shape again: a dropout mask per batch size) runs as launched again
  // first: recorded now, it would make that buffer again inside the capture, which fails it.
  enum Mode { Launch, First, Record, Replay };
  const bool warm = r.warm && ctx.released_blocks() == r.warm_at;
  int mode = !record || !ctx.can_capture() || !failed_before.empty() ? Launch
             : r.work                                                    ? Replay
             : !warm                                                     ? First
                                                                         : Record;
  if (hooks.least) mode = hooks.least(mode);
  if (mode == Launch || mode == First) {
    work();
    r.warm = true;
    r.warm_at = ctx.released_blocks();
    return false;
  }
  if (mode == Replay) {
    r.work->replay();
    return true;
  }
  r.work.reset();  // a rank that could replay records again with the others
  std::string failed;
  auto abandon = [&] {
    if (hooks.abandon) hooks.abandon();
    ctx.abort_capture();
  };
  const uint64_t released = ctx.released_blocks();
  ctx.begin_capture();
  try {
    work();
    r.work = ctx.end_capture();
    // The count from before the capture: a block handed back while recording (nothing should be)
    // may be handed out again, and the replays would still write it — so the next call's check
    // above finds the count moved and records again, as after any block handed back.
    r.released_at = released;
  } catch (const DeviceError& e) {
    // A library call that cannot be recorded (or an allocation the step should not make): nothing
    // of this step ran (a capture only records), so it runs as launched, and so do the next ones.
    abandon();
    failed = e.what();
  } catch (...) {
    abandon();
    throw;
  }
  // Every rank replays what it recorded, or none does (a recording that failed anywhere).
  if (hooks.least && hooks.least(failed.empty() ? 1 : 0) == 0 && failed.empty()) {
    r.work.reset();
    failed = "another replica's step could not be recorded";
  }
  if (!failed.empty()) {
    failed_before = failed;
    std::fprintf(stderr, "note: %s: the step could not be recorded as a CUDA graph (%s); steps run kernel by kernel "
                 "(devices.cuda_graphs: false says the same)\n", ctx.device().str().c_str(), failed.c_str());
    work();
    return false;
  }
  r.work->replay();
  return true;
}

}  // namespace trainer
