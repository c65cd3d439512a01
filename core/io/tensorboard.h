// TensorBoard event files: TFRecord-framed Event protobufs (core/io/tensorboard.proto) — scalars, text, reading back.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

// One TFRecord: uint64 length (little-endian), masked CRC-32C of those 8 bytes, the data, masked
// CRC-32C of the data.
std::string frame_record(const std::string& data);

// The records of a TFRecord file, in order. Reading stops at the first record that does not read
// back whole (a file cut short by kill -9, a CRC that does not match): `error` then says where and
// why ("<path>: record 12 at byte 3456: data CRC 0x... does not match 0x..."), empty when every
// byte of the file was read. A file that cannot be opened throws FileError.
struct Records {
  std::vector<std::string> records;
  std::string error;
};
Records read_records(const std::string& path);

// An events file of one writer: "<dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>" (as
// TensorFlow names them; ".2", ".3", ... appended if taken), `dir` created when missing. The first
// record is an Event with file_version "brain.Event:2". Events are buffered: flush() puts them on
// disk (the observer flushes at every epoch's end, every checkpoint and the run's end, so
// TensorBoard sees a live run). A failed write or flush (disk full, read-only folder) throws
// FileError "cannot write <path>: <reason>", as metrics.csv's writes do; the destructor closes the
// file and reports nothing.
class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  const std::string& path() const { return path_; }
  // One Event at `step` with a Summary.Value (simple_value, float32 as TensorBoard keeps scalars)
  // per (tag, value), in order.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time);
  // One Event at `step` with a text summary, as tensorboard's text plugin reads it: metadata
  // plugin_name "text", a scalar DT_STRING tensor holding `text` (rendered as Markdown).
  void text(int64_t step, const std::string& tag, const std::string& text);
  // An already serialized Event, as it is (an earlier run's events carried over).
  void event(const std::string& serialized);
  void flush();

 private:
  void put(const std::string& serialized);
  [[noreturn]] void fail(int err);
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Carries an earlier run's events (every events file in `from_dir`, a resumed run's checkpoint's
// run directory's tb/) into `to`: the scalar events whose every tag starts with `prefix` and whose
// step is at most `max_step`, in file order. Returns a warning line per file that did not read
// whole (its records before the fault are carried) or does not parse; none when `from_dir` is
// missing.
std::vector<std::string> carry_events(const std::string& from_dir, const std::string& prefix, int64_t max_step,
                                      EventWriter& to);

// `text` as a Markdown fenced code block of `language`, so TensorBoard's text dashboard shows it
// verbatim: a fence of three backticks, more when the text holds a run of three or more.
std::string markdown_code_block(const std::string& text, const std::string& language);

}  // namespace trainer
