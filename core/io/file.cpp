// Atomic file writes, the write-failure and stall test hooks, whole-file reads and CRC-32.
#include "core/io/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
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

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw FileError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  return s.str();
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
