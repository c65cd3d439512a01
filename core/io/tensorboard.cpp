// TensorBoard event files: TFRecord framing, the Event/Summary messages (protoc's classes of core/io/tensorboard.proto), reading records back.
#include "core/io/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/io/crc32c.h"
#include "core/io/file.h"
#include "core/io/tensorboard.pb.h"

namespace fs = std::filesystem;

namespace trainer {
namespace {

constexpr uint64_t kMaxRecord = uint64_t(64) << 20;  // far past any event this writer makes

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xFF));
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) return "localhost";
  std::string h = host;
  std::replace(h.begin(), h.end(), '/', '_');
  return h;
}

std::string serialize(const tensorboard::Event& e) {
  std::string out;
  e.SerializeToString(&out);
  return out;
}

}  // namespace

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xFF));
  put_u32(out, mask_crc32c(crc32c(out.data(), 8)));
  out += data;
  put_u32(out, mask_crc32c(crc32c(data.data(), data.size())));
  return out;
}

Records read_records(const std::string& path) {
  InputFile in(path);
  const std::string bytes = in.read_all();
  Records r;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t at = 0;
  for (int index = 0; at < bytes.size(); ++index) {
    auto fault = [&](const std::string& why) { r.error = fmt::format("{}: record {} at byte {}: {}", path, index, at, why); };
    if (bytes.size() - at < 12) {
      fault("cut short in its header");
      break;
    }
    const uint64_t n = get_le(p + at, 8);
    const uint32_t len_crc = uint32_t(get_le(p + at + 8, 4)), len_want = mask_crc32c(crc32c(p + at, 8));
    if (len_crc != len_want) {
      fault(fmt::format("length CRC {:#010x} does not match {:#010x}", len_crc, len_want));
      break;
    }
    if (n > kMaxRecord || bytes.size() - at - 12 < n + 4) {
      fault(fmt::format("{} bytes of data, {} left in the file", n, bytes.size() - at - 12));
      break;
    }
    const uint32_t data_crc = uint32_t(get_le(p + at + 12 + n, 4)), data_want = mask_crc32c(crc32c(p + at + 12, n));
    if (data_crc != data_want) {
      fault(fmt::format("data CRC {:#010x} does not match {:#010x}", data_crc, data_want));
      break;
    }
    r.records.push_back(bytes.substr(at + 12, n));
    at += 12 + n + 4;
  }
  return r;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw FileError(fmt::format("cannot create {}: {}", dir, ec.message()));
  const std::string base = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}", dir, int64_t(std::time(nullptr)),
                                       hostname(), int(getpid()));
  int fd = -1;
  for (int n = 1; fd < 0; ++n) {
    path_ = n == 1 ? base : fmt::format("{}.{}", base, n);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) throw FileError(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
  }
  f_ = fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    throw FileError(fmt::format("cannot write {}: {}", path_, std::strerror(err)));
  }
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_file_version("brain.Event:2");
  e.mutable_source_metadata()->set_writer("trainer");
  put(serialize(e));
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::fail(int err) {
  throw FileError(fmt::format("cannot write {}: {}", path_, std::strerror(err ? err : EIO)));
}

void EventWriter::put(const std::string& serialized) {
  const std::string rec = frame_record(serialized);
  errno = 0;
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size()) fail(errno);
}

void EventWriter::event(const std::string& serialized) { put(serialized); }

void EventWriter::flush() {
  errno = 0;
  if (std::fflush(f_) != 0) fail(errno);
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  scalars(step, values, now_seconds());
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tensorboard::Summary* s = e.mutable_summary();
  for (const auto& [tag, v] : values) {
    tensorboard::Summary::Value* val = s->add_value();
    val->set_tag(tag);
    val->set_simple_value(float(v));
  }
  put(serialize(e));
}

void EventWriter::text(int64_t step, const std::string& tag, const std::string& text) {
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  tensorboard::Summary::Value* val = e.mutable_summary()->add_value();
  val->set_tag(tag);
  // The text plugin's metadata: its name and an empty TextPluginData (version 0).
  val->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tensorboard::TensorProto* t = val->mutable_tensor();
  t->set_dtype(tensorboard::DT_STRING);
  t->mutable_tensor_shape();  // no dims: a scalar
  t->add_string_val(text);
  put(serialize(e));
}

std::vector<std::string> carry_events(const std::string& from_dir, const std::string& prefix, int64_t max_step,
                                      EventWriter& to) {
  std::vector<std::string> warnings;
  std::error_code ec;
  if (!fs::is_directory(from_dir, ec)) return warnings;
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(from_dir, ec))
    if (entry.is_regular_file(ec) && entry.path().filename().string().find("tfevents") != std::string::npos)
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());  // by start time: the names begin with it
  for (const std::string& file : files) {
    Records r;
    try {
      r = read_records(file);
    } catch (const FileError& err) {
      warnings.push_back(fmt::format("earlier TensorBoard events not carried over: {}", err.what()));
      continue;
    }
    for (size_t i = 0; i < r.records.size(); ++i) {
      tensorboard::Event e;
      if (!e.ParseFromString(r.records[i])) {
        warnings.push_back(fmt::format("earlier TensorBoard events not carried over: {}: record {} is not an Event", file, i));
        break;
      }
      if (!e.has_summary() || e.step() > max_step || e.summary().value_size() == 0) continue;
      bool ours = true;
      for (const auto& v : e.summary().value()) ours = ours && v.tag().rfind(prefix, 0) == 0 && v.has_simple_value();
      if (ours) to.event(r.records[i]);
    }
    if (!r.error.empty()) warnings.push_back("earlier TensorBoard events carried over up to a fault: " + r.error);
  }
  return warnings;
}

std::string markdown_code_block(const std::string& text, const std::string& language) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<size_t>(3, longest + 1), '`');
  std::string body = text;
  if (!body.empty() && body.back() != '\n') body += '\n';
  return fence + language + "\n" + body + fence + "\n";
}

}  // namespace trainer
