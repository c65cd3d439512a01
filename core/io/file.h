// Files that must survive a crash: atomic writes (temporary file, fsync, rename, fsync of the
// directory) and FileError, the error for unreadable or unwritable files (exit code 3).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainer {

// A file that cannot be read, is corrupt, or cannot be written (disk full, permissions):
// the message names the path (and the byte offset where that helps).
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `path` so that at every moment either the old file or the complete new one is there:
// the bytes go to "<path>.tmp-<pid>", which commit() fsyncs, renames over `path` and makes
// durable by fsyncing the directory. Destroyed without commit(), the temporary file is removed.
//
// Test hooks (environment):
//   TRAINER_TEST_WRITE_LIMIT=<bytes>  every write past this many bytes (over all atomic files of
//                                     the process) fails with ENOSPC, as on a full disk;
//   TRAINER_TEST_STALL_WRITE=<text>   a file whose name contains <text> stops half-written: one
//                                     line "test hook: stalling write of <tmp>" on stderr, then
//                                     a sleep of TRAINER_TEST_STALL_SECONDS (default 300: for
//                                     kill -9 during a checkpoint write; short: a signal there);
//   TRAINER_TEST_CORRUPT_WRITE=<text> a file whose name contains <text> has its last byte flipped
//                                     on disk before the rename (a checkpoint that does not
//                                     read back).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // Announces the final size so the stall hook knows where half is (optional).
  void expect(uint64_t total_bytes) { expected_ = total_bytes; }
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0, expected_ = 0;
  bool stall_ = false;
};

// The whole file at once, atomically.
void write_file_atomic(const std::string& path, const std::string& contents);
// The whole file; FileError naming the path when it cannot be read.
std::string read_text_file(const std::string& path);
// CRC-32 (zlib's polynomial) of a buffer, continuing from `crc`.
uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace trainer
