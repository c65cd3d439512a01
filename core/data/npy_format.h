// NumPy .npy files: a bounds-checked header parser, a memory-mapped reader with dtype conversion,
// and the header a float32 writer puts in front of its data (shared by stats and `type: npy`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainer::npy {

// The element types read: little-endian (or byte-sized) numbers only.
enum class Type { F4, F8, U1, I4, I8, U2 };
const char* descr_of(Type t);      // "<f4", "<f8", "|u1", "<i4", "<i8", "<u2"
const char* type_name(Type t);     // "float32", "float64", "uint8", "int32", "int64", "uint16" (token ids)
size_t type_size(Type t);
bool parse_descr(const std::string& descr, Type& out);  // also "<u1"/"u1" and the '=' native byte order
                                                       // (little-endian hosts only, as this file assumes)

// The format (numpy/lib/format.py): "\x93NUMPY", major, minor, a little-endian header length
// (uint16 for 1.0, uint32 for 2.0 and 3.0), the header (a Python dict literal with exactly the
// keys 'descr', 'fortran_order' and 'shape'), then the raw data.
struct Header {
  int major = 1, minor = 0;
  std::string descr;               // as written, e.g. "<f4" ("" with descr_at set when not a string)
  bool fortran_order = false;
  std::vector<int64_t> shape;      // () is a scalar
  size_t descr_at = 0;             // byte offsets of the values, for error messages
  size_t fortran_at = 0;
  size_t shape_at = 0;
  size_t data_offset = 0;          // the first data byte
  int64_t count() const;           // product of shape (1 for a scalar); the shape is checked not to overflow
  std::string shape_str() const;   // "(5, 20, 8)", "(3,)"
};

// Parses the header at the start of `bytes` (the whole file, `size` bytes). DataError
// "<path>: byte N: <what is wrong>" for anything malformed, N the offset of the fault.
Header parse_header(const uint8_t* bytes, size_t size, const std::string& path);

// The bytes of a version 1.0 (2.0 when the dict does not fit 1.0) header of a C-order array of
// `shape` and `descr`, padded so the data starts on a 64-byte boundary.
std::string make_header(const std::vector<int64_t>& shape, const std::string& descr = "<f4");

// A .npy file mapped read-only (read whole when mapping fails), its header parsed and checked
// against the file: a supported dtype (one of `accepted`), C order, and exactly the bytes the
// shape needs after the header. DataError naming the path for every fault:
//   "x.npy: dtype '>f4' is not supported (use '<f4', '<f8', '|u1', '<i4' or '<i8')"
//   "x.npy: the header says 5x20x8 float32 values (3200 bytes from byte 128), the file has 1000"
// Reads are thread-safe. The file must not be truncated while mapped (as any mmap reader).
class File {
 public:
  explicit File(const std::string& path,
                const std::vector<Type>& accepted = {Type::F4, Type::F8, Type::U1, Type::I4, Type::I8});
  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  Type type() const { return type_; }
  int64_t count() const { return header_.count(); }
  // Elements [first, first + n) in C order converted to float / int64. No bounds check beyond an
  // assert-style std::out_of_range (callers index by sample).
  void read_f32(int64_t first, int64_t n, float* out) const;
  int64_t read_int(int64_t index) const;  // integer types only (std::logic_error for floats)

 private:
  std::string path_;
  Header header_;
  Type type_ = Type::F4;
  std::shared_ptr<const void> owner_;  // the mapping (or buffer) that `data_` points into
  const uint8_t* data_ = nullptr;
};

}  // namespace trainer::npy
