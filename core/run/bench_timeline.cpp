// Formatting the bench's step timeline: text, JSON fields, Chrome trace.
#include "core/run/bench_timeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/io/file.h"

namespace trainer {
namespace {

// Seconds as ms to the microsecond; null when not measured (negative).
JsonLine ms(double seconds) { return seconds < 0 ? JsonLine(nullptr) : JsonLine(json_rounded(seconds * 1000, 3)); }
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

JsonLine timeline_json(const RankTimelines& t) {
  JsonLine out = JsonLine::array();
  for (const auto& [rank, s] : t) {
    JsonLine buckets = JsonLine::array();
    for (size_t b = 0; b < s.trace.size(); ++b) {
      const BucketTrace& x = s.trace[b];
      buckets.push_back({{"bucket", b}, {"floats", s.buckets[b].size()}, {"ready_ms", ms(x.ready)}, {"start_ms", ms(x.start)},
                         {"end_ms", ms(x.end)}, {"pieces", x.pieces}, {"pieces_here", x.pieces_here},
                         {"exchange_start_ms", ms(x.exchange_start)}, {"exchange_all_started_ms", ms(x.exchange_all)},
                         {"exchange_end_ms", ms(x.exchange_end)}});
    }
    out.push_back({{"rank", rank}, {"reduced_by", s.reduced_by}, {"forward_end_ms", ms(s.forward_end)},
                   {"backward_end_ms", ms(s.backward_end)}, {"update_end_ms", ms(s.update_end)}, {"buckets", buckets}});
  }
  return out;
}

void write_chrome_trace(const std::string& path, const RankTimelines& t) {
  JsonLine events = JsonLine::array();
  auto span = [&](int pid, int tid, const std::string& name, double a, double z) {
    if (a < 0 || z < a) return;
    events.push_back({{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", json_rounded(a * 1e6, 1)},
                      {"dur", json_rounded((z - a) * 1e6, 1)}});
  };
  auto thread_name = [&](int pid, int tid, const std::string& name) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  for (const auto& [rank, s] : t) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
    thread_name(rank, 0, "worker thread");
    span(rank, 0, "forward", 0, s.forward_end);
    span(rank, 0, "backward", s.forward_end, s.backward_end);
    span(rank, 0, "updates", s.backward_end, s.update_end);
    for (size_t b = 0; b < s.trace.size(); ++b) {
      const BucketTrace& x = s.trace[b];
      const int tid = 1 + int(b);
      thread_name(rank, tid, fmt::format("bucket {} ({} floats)", b, s.buckets[b].size()));
      span(rank, tid, "ready, not yet taken", x.ready, x.start);
      span(rank, tid, fmt::format("reduce ({} of {} pieces here)", x.pieces_here, x.pieces), x.start, x.end);
      if (x.exchange_all > x.exchange_start) span(rank, tid, "waiting for another process", x.exchange_start, x.exchange_all);
      span(rank, tid, "exchange with other processes", std::max(x.exchange_start, x.exchange_all), x.exchange_end);
    }
  }
  write_file_atomic(path, JsonLine{{"traceEvents", events}}.dump(1, ' ', false, JsonLine::error_handler_t::replace) + "\n");
}

}  // namespace trainer
