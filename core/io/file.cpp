// Atomic file writes, the write-failure and stall test hooks, safe input files, whole-file reads and CRC-32.
#include "core/io/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace trainer {
namespace {

std::atomic<uint64_t> g_bytes_written{0};

uint64_t write_limit() {
  static const uint64_t limit = [] {
    const char* v = std::getenv("TRAINER_TEST_WRITE_LIMIT");
    return v ? uint64_t(std::strtoull(v, nullptr, 10)) : UINT64_MAX;
  }();
  return limit;
}

bool should_stall(const std::string& path) {
  const char* v = std::getenv("TRAINER_TEST_STALL_WRITE");
  return v && *v && std::filesystem::path(path).filename().string().find(v) != std::string::npos;
}

bool should_corrupt(const std::string& path) {
  const char* v = std::getenv("TRAINER_TEST_CORRUPT_WRITE");
  return v && *v && std::filesystem::path(path).filename().string().find(v) != std::string::npos;
}

// TRAINER_TEST_STALL_SECONDS: how long the stall lasts (default 300: until the test kills it).
long stall_seconds() {
  const char* v = std::getenv("TRAINER_TEST_STALL_SECONDS");
  return v && *v ? std::strtol(v, nullptr, 10) : 300;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = fmt::format("{}.tmp-{}", path_, ::getpid());
  fd_ = ::open(tmp_.c_str(), (should_corrupt(path_) ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", errno);
  stall_ = should_stall(path_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
  }
  throw FileError(fmt::format("{} {}: {}", what, path_, std::strerror(err)));
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    size_t chunk = bytes;
    if (stall_ && expected_ > 0 && written_ < expected_ / 2) chunk = std::min<size_t>(chunk, size_t(expected_ / 2 - written_));
    if (g_bytes_written.load() + chunk > write_limit()) fail("cannot write", ENOSPC);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    p += n;
    bytes -= size_t(n);
    written_ += uint64_t(n);
    g_bytes_written += uint64_t(n);
    if (stall_ && expected_ > 0 && written_ >= expected_ / 2) {
      stall_ = false;
      ::fsync(fd_);
      std::fprintf(stderr, "test hook: stalling write of %s\n", tmp_.c_str());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::seconds(stall_seconds()));
    }
  }
}

void AtomicFile::commit() {
  if (should_corrupt(path_) && written_ > 0) {  // test hook: what a disk that lies would leave
    char last = 0;
    if (::pread(fd_, &last, 1, off_t(written_ - 1)) == 1) {
      last = char(last ^ 0x55);
      if (::pwrite(fd_, &last, 1, off_t(written_ - 1)) != 1) fail("cannot write", errno);
    }
  }
  if (::fsync(fd_) != 0) fail("cannot write", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw FileError(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    throw FileError(fmt::format("cannot write {}: {}", path_, std::strerror(err)));
  }
  // The rename itself is durable only once the directory is.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile f(path);
  f.expect(contents.size());
  f.write(contents);
  f.commit();
}

InputFileError::InputFileError(std::string p, std::string r, int e, std::string k)
    : FileError(p + ": " + r), path(std::move(p)), reason(std::move(r)), kind(std::move(k)), err(e) {}

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw InputFileError(path_, fmt::format("cannot open: {}", std::strerror(err)), err);
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw InputFileError(path_, fmt::format("cannot stat: {}", std::strerror(err)), err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    const std::string kind = kind_of(st.st_mode);
    throw InputFileError(path_, fmt::format("is {}, not a regular file", kind), 0, kind);
  }
  size_ = uint64_t(st.st_size);
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // a regular file: plain blocking reads
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string InputFile::read_all(uint64_t max_bytes, const std::string& limit_name) {
  if (size_ > max_bytes)
    throw InputFileError(path_, fmt::format("{} bytes, larger than {}{}, not read", size_, format_bytes(max_bytes),
                                            limit_name.empty() ? "" : " (" + limit_name + ")"));
  std::string out(size_t(size_), '\0');  // a file that grows meanwhile is read to its size at open
  size_t have = 0;
  while (have < out.size()) {
    const ssize_t n = ::read(fd_, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputFileError(path_, fmt::format("read error: {}", std::strerror(errno)), errno);
    if (n == 0) break;  // shrunk meanwhile
    have += size_t(n);
  }
  out.resize(have);
  return out;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, v < 10 ? 1 : 0, units[u]);
}

// How long a FIFO that no program has open for writing is given for one to open it.
constexpr int kFifoWriterWaitMs = 2000;

bool is_stream(const std::string& path) {
  struct stat st {};
  return path == "-" || (::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode));
}

std::string read_stream(const std::string& path, uint64_t max_bytes, const std::string& limit_name,
                        int idle_seconds) {
  const bool stdin_ = path == "-";
  const int fd = stdin_ ? ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0) : ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw InputFileError(path, fmt::format("cannot open: {}", std::strerror(err)), err);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // A FIFO opened without blocking reads as ended (0) while no program has it open for writing, and
  // poll() does not wait for a first writer: give one a moment to appear (`mkfifo f; gen > f &`).
  // Once a writer was seen (data, or "no data yet"), 0 is the end and poll() waits for data.
  std::string out;
  char buf[65536];
  bool writer_seen = stdin_;
  int no_writer_ms = 0;
  for (;;) {
    if (writer_seen && !stdin_) {
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, idle_seconds * 1000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0)
        throw InputFileError(path, fmt::format("a pipe that sent nothing for {} s: no program writes to it?", idle_seconds));
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // a writer, no data yet
      writer_seen = true;
      continue;
    }
    if (n < 0) {
      const int err = errno;
      throw InputFileError(path, fmt::format("read error: {}", std::strerror(err)), err);
    }
    if (n == 0 && !writer_seen) {
      if (no_writer_ms >= kFifoWriterWaitMs)
        throw InputFileError(path, "is a FIFO that no program writes to (nothing to read)", 0, "a FIFO");
      ::usleep(20 * 1000);
      no_writer_ms += 20;
      continue;
    }
    if (n == 0) break;  // the end: every writer closed it
    writer_seen = true;
    if (out.size() + size_t(n) > max_bytes)
      throw InputFileError(path, fmt::format("more than {}{}, not read further", format_bytes(max_bytes),
                                             limit_name.empty() ? "" : " (" + limit_name + ")"));
    out.append(buf, size_t(n));
  }
  return out;
}

std::string read_text_file(const std::string& path, uint64_t max_bytes, const std::string& limit_name) {
  try {
    InputFile f(path);
    return f.read_all(max_bytes, limit_name);
  } catch (const InputFileError& e) {
    if (e.err != 0) throw FileError(fmt::format("cannot read {}: {}", path, std::strerror(e.err)));
    throw;
  }
}

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    uInt n = uInt(std::min<size_t>(bytes, 1u << 30));
    crc = uint32_t(::crc32(crc, p, n));
    p += n;
    bytes -= n;
  }
  return crc;
}

}  // namespace trainer
