// The data-parallel step as a timeline (`trainer bench --timeline`, `--trace`): per gradient
// bucket, when it was ready, when its reduction started and ended and which threads did it; as
// text, as fields of the bench's JSON line, and as a Chrome trace (Horovod's timeline format).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/io/json_text.h"
#include "core/runtime/bench_result.h"

namespace trainer {

// A table per rank, ms from the step's start, buckets in the order backward finished them.
std::string timeline_text(const RankTimelines& t);
// The "timeline" field of the bench's JSON line: an object per rank (an empty array for none).
JsonLine timeline_json(const RankTimelines& t);
// chrome://tracing / Perfetto JSON: a process per rank, forward/backward/update on its worker
// thread, each bucket's reduction on a track of its own. FileError when it cannot be written.
void write_chrome_trace(const std::string& path, const RankTimelines& t);

}  // namespace trainer
