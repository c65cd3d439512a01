// Files in and out: atomic writes that survive a crash (temporary file, fsync, rename, fsync of the
// directory), InputFile for reading outside bytes safely, and FileError (exit code 3).
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

// Why an input file cannot be read: `reason` without the path ("cannot open: No such file or
// directory", "is a FIFO, not a regular file", "5 GiB, larger than 4 MiB (the limit), not read");
// `err` is open()'s errno when opening failed, `kind` what the path is when it is not a regular
// file ("a FIFO", "a character device", "a block device", "a socket", "a directory").
class InputFileError : public FileError {
 public:
  InputFileError(std::string path, std::string reason, int err = 0, std::string kind = "");
  std::string path, reason, kind;
  int err = 0;
};

// A file of bytes from outside (data, configs, checkpoints) opened for reading. Opening never
// blocks (O_NONBLOCK: a FIFO named like an image has no writer), and anything but a regular file is
// refused before a byte is read; then O_NONBLOCK is cleared. Every reader of outside files opens
// them through this, and reads at most what its format allows.
class InputFile {
 public:
  explicit InputFile(std::string path);  // InputFileError "<path>: cannot open: ..." / "<path>: is a FIFO, ..."
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // as fstat saw it at open
  // The descriptor, now the caller's to close (gzdopen takes it).
  int release();
  // The whole file, at most its size at open: refused before allocating when that is past
  // `max_bytes` ("<path>: N bytes, larger than <max> (<limit_name>), not read").
  std::string read_all(uint64_t max_bytes = UINT64_MAX, const std::string& limit_name = "");

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Standard input ("-") or a pipe (a FIFO; bash's `<(command)` is /dev/fd/N): whether `path` is one.
bool is_stream(const std::string& path);
// Its bytes to the end, read once (a stream cannot be read again), at most `max_bytes`
// (InputFileError past that, without reading further). A FIFO that no program opens for writing
// within 2 s is refused rather than waited for, and one that sends nothing for `idle_seconds` is
// given up on: reading never hangs on a forgotten pipe. Standard input is read as it comes (a
// terminal: until Ctrl-D).
std::string read_stream(const std::string& path, uint64_t max_bytes, const std::string& limit_name,
                        int idle_seconds = 60);

// "1.5 GiB", "300 MiB", "12 KiB", "100 B".
std::string format_bytes(uint64_t bytes);

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
// The whole file through InputFile, at most `max_bytes`; FileError naming the path when it cannot
// be read ("cannot read <path>: <reason>"), is not a regular file or is larger.
std::string read_text_file(const std::string& path, uint64_t max_bytes = UINT64_MAX, const std::string& limit_name = "");
// CRC-32 (zlib's polynomial) of a buffer, continuing from `crc`.
uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace trainer
