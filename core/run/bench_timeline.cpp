// Formatting the bench's step timeline: text, JSON fields, Chrome trace.
#include "core/run/bench_timeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/io/file.h"

namespace trainer {
namespace {

std::string ms(double seconds) { return seconds < 0 ? "null" : fmt::format("{:.3f}", seconds * 1000); }
std::string cell(double seconds) { return seconds < 0 ? "-" : fmt::format("{:.2f}", seconds * 1000); }
bool exchanged(const StepTimeline& s) {
  for (const BucketTrace& b : s.trace)
    if (b.exchange_start >= 0) return true;
  return false;
}

}  // namespace

std::string timeline_text(const RankTimelines& t) {
  std::string out;
  for (const auto& [rank, s] : t) {
    const bool ex = exchanged(s);
    out += fmt::format("Timeline of rank {}'s last step (ms from its start; gradients reduced by {}): forward ends {:.2f}, "
                       "backward ends {:.2f}, updates end {:.2f}\n",
                       rank, s.reduced_by, s.forward_end * 1000, s.backward_end * 1000, s.update_end * 1000);
    out += fmt::format("  {:>6} {:>10} {:>10} {:>10} {:>10} {:>14}{}\n", "bucket", "floats", "ready", "start", "end",
                       "pieces (here)", ex ? "  exchange start / all started / end (other processes)" : "");
    for (size_t b = s.trace.size(); b-- > 0;) {
      const BucketTrace& x = s.trace[b];
      out += fmt::format("  {:>6} {:>10} {:>10} {:>10} {:>10} {:>14}{}\n", b, s.buckets[b].size(), cell(x.ready), cell(x.start),
                         cell(x.end), fmt::format("{} ({})", x.pieces, x.pieces_here),
                         ex ? fmt::format("  {} / {} / {}", cell(x.exchange_start), cell(x.exchange_all), cell(x.exchange_end)) : "");
    }
  }
  return out;
}

std::string timeline_json(const RankTimelines& t) {
  if (t.empty()) return "";
  std::string out = ", \"timeline\": [";
  for (size_t i = 0; i < t.size(); ++i) {
    const auto& [rank, s] = t[i];
    out += fmt::format("{}{{\"rank\": {}, \"reduced_by\": \"{}\", \"forward_end_ms\": {}, \"backward_end_ms\": {}, "
                       "\"update_end_ms\": {}, \"buckets\": [",
                       i ? ", " : "", rank, s.reduced_by, ms(s.forward_end), ms(s.backward_end), ms(s.update_end));
    for (size_t b = 0; b < s.trace.size(); ++b) {
      const BucketTrace& x = s.trace[b];
      out += fmt::format("{}{{\"bucket\": {}, \"floats\": {}, \"ready_ms\": {}, \"start_ms\": {}, \"end_ms\": {}, \"pieces\": {}, "
                         "\"pieces_here\": {}, \"exchange_start_ms\": {}, \"exchange_all_started_ms\": {}, \"exchange_end_ms\": {}}}",
                         b ? ", " : "", b, s.buckets[b].size(), ms(x.ready), ms(x.start), ms(x.end), x.pieces, x.pieces_here,
                         ms(x.exchange_start), ms(x.exchange_all), ms(x.exchange_end));
    }
    out += "]}";
  }
  return out + "]";
}

void write_chrome_trace(const std::string& path, const RankTimelines& t) {
  std::string ev;
  auto add = [&](const std::string& e) { ev += (ev.empty() ? "" : ",\n") + e; };
  auto span = [&](int pid, int tid, const std::string& name, double a, double z) {
    if (a < 0 || z < a) return;
    add(fmt::format(R"j({{"name": "{}", "ph": "X", "pid": {}, "tid": {}, "ts": {:.1f}, "dur": {:.1f}}})j", name, pid, tid, a * 1e6,
                    (z - a) * 1e6));
  };
  for (const auto& [rank, s] : t) {
    add(fmt::format(R"j({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "rank {}"}}}})j", rank, rank));
    add(fmt::format(R"j({{"name": "thread_name", "ph": "M", "pid": {}, "tid": 0, "args": {{"name": "worker thread"}}}})j", rank));
    span(rank, 0, "forward", 0, s.forward_end);
    span(rank, 0, "backward", s.forward_end, s.backward_end);
    span(rank, 0, "updates", s.backward_end, s.update_end);
    for (size_t b = 0; b < s.trace.size(); ++b) {
      const BucketTrace& x = s.trace[b];
      const int tid = 1 + int(b);
      add(fmt::format(R"j({{"name": "thread_name", "ph": "M", "pid": {}, "tid": {}, "args": {{"name": "bucket {} ({} floats)"}}}})j",
                      rank, tid, b, s.buckets[b].size()));
      span(rank, tid, "ready, not yet taken", x.ready, x.start);
      span(rank, tid, fmt::format("reduce ({} of {} pieces here)", x.pieces_here, x.pieces), x.start, x.end);
      if (x.exchange_all > x.exchange_start) span(rank, tid, "waiting for another process", x.exchange_start, x.exchange_all);
      span(rank, tid, "exchange with other processes", std::max(x.exchange_start, x.exchange_all), x.exchange_end);
    }
  }
  write_file_atomic(path, "{\"traceEvents\": [\n" + ev + "\n]}\n");
}

}  // namespace trainer
