// InputFile (core/io/file.h): a FIFO or a device is refused at once with a line naming it, a file
// past the caller's bound before it is read; printable() (core/io/printable.h): one line, valid UTF-8.
#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/io/file.h"
#include "core/io/printable.h"
#include "test_dirs.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir() { return trainer::test::test_dir("input-file"); }

// The message of the InputFileError opening (and reading whole, within `max`) `path` throws.
std::string refusal(const std::string& path, uint64_t max = UINT64_MAX) {
  try {
    InputFile(path).read_all(max, "the limit");
  } catch (const InputFileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("input file: a regular file is read whole, within its bound") {
  const std::string d = fresh_dir();
  std::ofstream(d + "/a.txt", std::ios::binary) << "hello";
  InputFile f(d + "/a.txt");
  CHECK(f.size() == 5);
  CHECK(f.read_all(5) == "hello");
  CHECK(read_text_file(d + "/a.txt", 5) == "hello");
  CHECK(refusal(d + "/a.txt", 4) == d + "/a.txt: 5 bytes, larger than 4 B (the limit), not read");
  std::ofstream(d + "/empty", std::ios::binary) << "";
  CHECK(InputFile(d + "/empty").read_all().empty());
}

TEST_CASE("input file: a FIFO without a writer is refused at once, not waited on") {
  const std::string d = fresh_dir();
  REQUIRE(::mkfifo((d + "/a.png").c_str(), 0644) == 0);
  const auto start = std::chrono::steady_clock::now();
  CHECK(refusal(d + "/a.png") == d + "/a.png: is a FIFO, not a regular file");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("input file: devices, directories and sockets are refused by what they are, a missing file by errno") {
  const std::string d = fresh_dir();
  CHECK(refusal("/dev/zero") == "/dev/zero: is a character device, not a regular file");
  fs::create_symlink("/dev/zero", d + "/x.npy");  // a link is followed: what it names counts
  CHECK(refusal(d + "/x.npy") == d + "/x.npy: is a character device, not a regular file");
  CHECK(refusal(d) == d + ": is a directory, not a regular file");
  CHECK(refusal(d + "/none") == d + "/none: cannot open: No such file or directory");
  try {
    InputFile f(d + "/none");
  } catch (const InputFileError& e) {
    CHECK(e.err == ENOENT);
    CHECK(e.kind.empty());
  }
  // read_text_file keeps its own wording for a file that cannot be opened.
  CHECK_THROWS_WITH(read_text_file(d + "/none"), "cannot read " + d + "/none: No such file or directory");

  const std::string sock = d + "/s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd >= 0 && sock.size() < sizeof addr.sun_path) {
    sock.copy(addr.sun_path, sock.size());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    CHECK(refusal(sock) == sock + ": cannot open: No such device or address");  // open() itself refuses a socket
  }
  if (fd >= 0) ::close(fd);
}

TEST_CASE("printable: one line of valid UTF-8, whatever the bytes") {
  CHECK(printable("plain/name.png") == "plain/name.png");
  CHECK(printable("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(printable(std::string("a\0b\x1b\x7f", 5)) == "a\\x00b\\x1b\\x7f");
  CHECK(printable("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");  // UTF-8 stays
  CHECK(printable("\xff\xc3") == "\\xff\\xc3");                  // not UTF-8; a sequence cut short
  CHECK(printable("\xc0\xaf \xed\xa0\x80") == "\\xc0\\xaf \\xed\\xa0\\x80");  // overlong; a surrogate
  CHECK(printable("quote \" and back\\slash") == "quote \" and back\\slash");
  CHECK(printable(printable("a\n\xff")) == printable("a\n\xff"));  // idempotent
}
