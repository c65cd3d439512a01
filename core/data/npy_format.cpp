// NumPy .npy header parsing (bounds-checked, every fault at its byte offset), mapping and writing.
#include "core/data/npy_format.h"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "core/data/dataset.h"
#include "core/data/util.h"

namespace trainer::npy {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

struct TypeInfo {
  Type type;
  const char* descr;
  const char* name;
  size_t size;
};
constexpr TypeInfo kTypes[] = {{Type::F4, "<f4", "float32", 4}, {Type::F8, "<f8", "float64", 8},
                               {Type::U1, "|u1", "uint8", 1},   {Type::I4, "<i4", "int32", 4},
                               {Type::I8, "<i8", "int64", 8},   {Type::U2, "<u2", "uint16", 2}};
const TypeInfo& info(Type t) { return kTypes[int(t)]; }

constexpr int64_t kMaxElements = int64_t(1) << 58;  // so that elements * 8 bytes fits comfortably

// A cursor over the header dict [p, end) of the file's bytes; offsets in messages are absolute.
class DictParser {
 public:
  DictParser(const uint8_t* b, size_t p, size_t end, const std::string& path) : b_(b), p_(p), end_(end), path_(path) {}

  Header parse(Header h) {
    skip_ws();
    expect('{');
    bool seen[3] = {false, false, false};
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const size_t key_at = p_;
      const std::string key = string_literal();
      int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0) throw fail(key_at, fmt::format("unexpected key '{}' (a .npy header has 'descr', 'fortran_order' and 'shape')", key));
      if (seen[k]) throw fail(key_at, fmt::format("key '{}' appears twice", key));
      seen[k] = true;
      skip_ws();
      expect(':');
      skip_ws();
      if (k == 0) {
        h.descr_at = p_;
        if (peek() == '[' || peek() == '{')
          throw fail(p_, "structured dtypes (a list or dict 'descr') are not supported");
        h.descr = string_literal();
      } else if (k == 1) {
        h.fortran_at = p_;
        if (word("True")) h.fortran_order = true;
        else if (word("False")) h.fortran_order = false;
        else throw fail(p_, "'fortran_order' is neither True nor False");
      } else {
        h.shape_at = p_;
        h.shape = shape_tuple();
      }
      skip_ws();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() != '}') throw fail(p_, fmt::format("expected ',' or '}}', found {}", shown()));
    }
    const size_t close = p_;
    ++p_;
    for (const char* name : {"descr", "fortran_order", "shape"}) {
      const int k = name[0] == 'd' ? 0 : name[0] == 'f' ? 1 : 2;
      if (!seen[k]) throw fail(close, fmt::format("the header has no '{}'", name));
    }
    skip_ws();
    if (p_ < end_) throw fail(p_, fmt::format("unexpected {} after the header dict", shown()));
    return h;
  }

 private:
  DataError fail(size_t at, const std::string& why) const { return DataError(fmt::format("{}: byte {}: {}", path_, at, why)); }
  int peek() const { return p_ < end_ ? int(b_[p_]) : -1; }
  std::string shown() const {
    if (p_ >= end_) return "the end of the header";
    const char c = char(b_[p_]);
    return c >= 0x20 && c < 0x7f ? fmt::format("'{}'", c) : fmt::format("byte 0x{:02x}", unsigned(uint8_t(c)));
  }
  void skip_ws() {
    while (p_ < end_ && (b_[p_] == ' ' || b_[p_] == '\t' || b_[p_] == '\n' || b_[p_] == '\r')) ++p_;
  }
  void expect(char c) {
    if (peek() != c) throw fail(p_, fmt::format("expected '{}', found {}", c, shown()));
    ++p_;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (end_ - p_ < n || std::memcmp(b_ + p_, w, n) != 0) return false;
    p_ += n;
    return true;
  }
  std::string string_literal() {
    const int q = peek();
    if (q != '\'' && q != '"') throw fail(p_, fmt::format("expected a quoted string, found {}", shown()));
    const size_t start = ++p_;
    while (p_ < end_ && b_[p_] != q) {
      if (b_[p_] == '\\') throw fail(p_, "escapes in header strings are not supported");
      ++p_;
    }
    if (p_ >= end_) throw fail(start - 1, "unterminated string");
    std::string s(reinterpret_cast<const char*>(b_ + start), p_ - start);
    ++p_;
    return s;
  }
  std::vector<int64_t> shape_tuple() {
    std::vector<int64_t> dims;
    expect('(');
    int64_t total = 1;
    for (;;) {
      skip_ws();
      if (peek() == ')') break;
      const size_t at = p_;
      if (peek() < '0' || peek() > '9') throw fail(p_, fmt::format("expected a dimension, found {}", shown()));
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        d = d * 10 + (peek() - '0');
        if (d > kMaxElements) throw fail(at, "dimension too large");
        ++p_;
      }
      if (peek() == 'L') ++p_;  // Python 2 longs
      if (d > 0 && total > kMaxElements / d) throw fail(at, "the shape has too many elements");
      total *= d;
      dims.push_back(d);
      skip_ws();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() != ')') throw fail(p_, fmt::format("expected ',' or ')' in the shape, found {}", shown()));
    }
    ++p_;
    return dims;
  }

  const uint8_t* b_;
  size_t p_, end_;
  const std::string& path_;
};

std::string join_accepted(const std::vector<Type>& accepted) {
  std::string s;
  for (size_t i = 0; i < accepted.size(); ++i) {
    if (i) s += i + 1 == accepted.size() ? " or " : ", ";
    s += fmt::format("'{}'", descr_of(accepted[i]));
  }
  return s;
}

}  // namespace

const char* descr_of(Type t) { return info(t).descr; }
const char* type_name(Type t) { return info(t).name; }
size_t type_size(Type t) { return info(t).size; }

bool parse_descr(const std::string& descr, Type& out) {
  std::string d = descr;
  if (d.size() == 2) d = (d == "u1" || d == "b1" ? "|" : "<") + d;  // no byte order given
  if (!d.empty() && d[0] == '=') d[0] = '<';                      // native: little-endian here
  if (d == "<u1") d = "|u1";
  for (const TypeInfo& t : kTypes)
    if (d == t.descr) return out = t.type, true;
  return false;
}

int64_t Header::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked against overflow by the parser
  return n;
}

std::string Header::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

Header parse_header(const uint8_t* b, size_t size, const std::string& path) {
  auto fail = [&](size_t at, const std::string& why) { return DataError(fmt::format("{}: byte {}: {}", path, at, why)); };
  if (size == 0) throw fail(0, "the file is empty (not a .npy file)");
  static constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  for (size_t i = 0; i < 6; ++i) {
    if (i >= size) throw fail(i, "the file ends inside the \\x93NUMPY magic");
    if (b[i] != kMagic[i]) throw fail(i, "no \\x93NUMPY magic (not a .npy file)");
  }
  if (size < 8) throw fail(size, "the file ends inside the format version");
  Header h;
  h.major = b[6], h.minor = b[7];
  if (h.major < 1 || h.major > 3 || h.minor != 0)
    throw fail(6, fmt::format("format version {}.{} is not 1.0, 2.0 or 3.0", h.major, h.minor));
  const size_t len_bytes = h.major == 1 ? 2 : 4, start = 8 + len_bytes;
  if (size < start) throw fail(8, fmt::format("the file ends inside the {}-byte header length", len_bytes));
  size_t len = 0;
  for (size_t k = 0; k < len_bytes; ++k) len |= size_t(b[8 + k]) << (8 * k);
  if (len > size - start)
    throw fail(8, fmt::format("header length {} runs past the end of the {}-byte file", len, size));
  h.data_offset = start + len;
  return DictParser(b, start, start + len, path).parse(std::move(h));
}

std::string make_header(const std::vector<int64_t>& shape, const std::string& descr) {
  Header h;
  h.shape = shape;
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, h.shape_str());
  const bool v2 = 10 + dict.size() + 1 + 63 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  dict.append((64 - (prefix + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += char(v2 ? 2 : 1), out += char(0);
  for (size_t k = 0; k < (v2 ? 4u : 2u); ++k) out += char((dict.size() >> (8 * k)) & 0xff);
  return out + dict;
}

File::File(const std::string& path, const std::vector<Type>& accepted) : path_(path) {
  data_util::MappedFile m = data_util::map_file(path);
  const size_t have_bytes = m.size;
  owner_ = m.owner;
  const uint8_t* base = m.data;
  header_ = parse_header(base, have_bytes, path);
  bool ok = parse_descr(header_.descr, type_);
  if (ok) {
    ok = false;
    for (Type t : accepted) ok = ok || t == type_;
  }
  if (!ok)
    throw DataError(fmt::format("{}: dtype '{}' is not supported (use {})", path, header_.descr, join_accepted(accepted)));
  if (header_.fortran_order) {
    int big = 0;  // with at most one dimension above 1, Fortran and C order are the same bytes
    for (int64_t d : header_.shape) big += d > 1;
    if (big > 1)
      throw DataError(fmt::format("{}: fortran_order is True: only C-order arrays are read "
                                  "(save numpy.ascontiguousarray(a) instead)", path));
  }
  const size_t need = size_t(count()) * type_size(type_), have = have_bytes - header_.data_offset;
  if (need != have) {
    std::string dims;
    for (int64_t d : header_.shape) dims += fmt::format("{}{}", dims.empty() ? "" : "x", d);
    throw DataError(fmt::format("{}: the header says {} {} values ({} bytes from byte {}), the file has {}", path,
                                dims.empty() ? "1" : dims, type_name(type_), need, header_.data_offset, have));
  }
  data_ = base + header_.data_offset;
}

void File::read_f32(int64_t first, int64_t n, float* out) const {
  if (first < 0 || n < 0 || first + n > count())
    throw std::out_of_range(fmt::format("{}: elements [{}, {}) outside {}", path_, first, first + n, count()));
  const uint8_t* p = data_ + size_t(first) * type_size(type_);
  switch (type_) {
    case Type::F4: std::memcpy(out, p, size_t(n) * 4); return;
    case Type::F8:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = float(v);
      }
      return;
    case Type::U1:
      for (int64_t i = 0; i < n; ++i) out[i] = float(p[i]);
      return;
    case Type::I4:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = float(v);
      }
      return;
    case Type::U2:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = float(v);
      }
      return;
    case Type::I8:
      for (int64_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = float(v);
      }
      return;
  }
}

int64_t File::read_int(int64_t index) const {
  if (index < 0 || index >= count())
    throw std::out_of_range(fmt::format("{}: element {} outside {}", path_, index, count()));
  const uint8_t* p = data_ + size_t(index) * type_size(type_);
  switch (type_) {
    case Type::U1: return p[0];
    case Type::I4: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case Type::I8: { int64_t v; std::memcpy(&v, p, 8); return v; }
    case Type::U2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case Type::F4:
    case Type::F8: break;
  }
  throw std::logic_error(fmt::format("{}: read_int on a {} array", path_, type_name(type_)));
}

}  // namespace trainer::npy
