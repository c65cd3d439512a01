// safetensors writing and checked reading.
#include "core/io/safetensors.h"

#include <fmt/format.h>

#include <stdexcept>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/io/file.h"

namespace trainer {
namespace {

using json = nlohmann::ordered_json;

size_t dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes{{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                   {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

}  // namespace

void SafeTensorsWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                            const void* data, size_t bytes) {
  for (const SafeTensor& o : tensors_)  // the header is a JSON object: one entry per name
    if (o.name == name) throw std::logic_error(fmt::format("safetensors: two tensors named '{}'", name));
  SafeTensor t{name, dtype, shape, data_.size(), data_.size() + bytes};
  data_.append(static_cast<const char*>(data), bytes);
  tensors_.push_back(std::move(t));
}

void SafeTensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  add(name, "F32", shape, data, size_t(n) * sizeof(float));
}

void SafeTensorsWriter::add_i64(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  add(name, "I64", shape, data, size_t(n) * sizeof(int64_t));
}

std::string SafeTensorsWriter::serialize() const {
  json h = json::object();
  if (!metadata_.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    h["__metadata__"] = m;
  }
  for (const SafeTensor& t : tensors_) h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);  // little-endian
  out += header;
  out += data_;
  return out;
}

std::pair<uint64_t, uint32_t> SafeTensorsWriter::write(const std::string& path) const {
  std::string bytes = serialize();
  write_file_atomic(path, bytes);
  return {bytes.size(), crc32_of(bytes.data(), bytes.size())};
}

SafeTensorsReader::SafeTensorsReader(const std::string& path)
    : SafeTensorsReader(path, std::make_shared<const std::string>(read_text_file(path))) {}  // a regular file, read to its size

SafeTensorsReader::SafeTensorsReader(const std::string& path, std::shared_ptr<const std::string> bytes)
    : path_(path), bytes_(std::move(bytes)) {
  parse();
}

void SafeTensorsReader::parse() {
  const std::string& bytes = *bytes_;
  const std::string& path = path_;
  auto bad = [&](uint64_t offset, const std::string& why) {
    return FileError(fmt::format("{}: corrupt safetensors file at byte {}: {}", path, offset, why));
  };
  if (bytes.size() < 8) throw bad(0, fmt::format("only {} bytes, less than the 8-byte header length", bytes.size()));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  if (n > bytes.size() - 8)
    throw bad(0, fmt::format("the header length {} runs past the end of the file ({} bytes): truncated?", n, bytes.size()));
  data_offset_ = 8 + n;
  json h;
  try {
    h = json::parse(bytes.begin() + 8, bytes.begin() + std::ptrdiff_t(data_offset_));
  } catch (const json::parse_error& e) {
    throw bad(8 + (e.byte > 0 ? e.byte - 1 : 0), "the header is not valid JSON");
  } catch (const json::exception&) {  // valid syntax nlohmann cannot hold, e.g. 1e999 (out_of_range 406)
    throw bad(8, "the header holds a number too large for a double");
  }
  if (!h.is_object()) throw bad(8, "the header is not a JSON object");
  uint64_t data_bytes = bytes.size() - data_offset_;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const json& v = it.value();
    if (it.key() == "__metadata__") {
      if (!v.is_object()) throw bad(8, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
        else throw bad(8, fmt::format("__metadata__ '{}' is not a string (the format allows only strings there)", m.key()));
      continue;
    }
    auto entry = [&](const std::string& why) { return bad(8, fmt::format("tensor '{}': {}", it.key(), why)); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw entry("needs dtype, shape and data_offsets");
    SafeTensor t;
    t.name = it.key();
    if (!v["dtype"].is_string() || dtype_size(v["dtype"].get<std::string>()) == 0) throw entry("unknown dtype");
    t.dtype = v["dtype"].get<std::string>();
    if (!v["shape"].is_array()) throw entry("shape is not a list");
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw entry("shape holds something other than sizes");
      uint64_t s = d.get<uint64_t>();
      if (s > (1ull << 40) || (s > 0 && numel > (1ull << 40) / s)) throw entry("shape too large");  // no overflow
      numel *= s;
      t.shape.push_back(int64_t(s));
    }
    const json& o = v["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      throw entry("data_offsets is not [begin, end]");
    t.begin = o[0].get<uint64_t>();
    t.end = o[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_bytes)
      throw entry(fmt::format("bytes [{}, {}) lie outside the data section of {} bytes: truncated?", t.begin, t.end, data_bytes));
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      throw entry(fmt::format("{} bytes do not hold a {} tensor of {} elements", t.end - t.begin, t.dtype, numel));
    tensors_.push_back(std::move(t));
  }
  // The tensors tile the data section: no overlaps, no holes, nothing after the last one.
  std::vector<const SafeTensor*> order;
  for (const SafeTensor& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  uint64_t at = 0;
  for (const SafeTensor* t : order) {
    if (t->begin != at) throw bad(data_offset_ + at, fmt::format("tensor '{}' leaves a hole or overlaps another", t->name));
    at = t->end;
  }
  if (at != data_bytes) throw bad(data_offset_ + at, fmt::format("{} bytes follow the last tensor", data_bytes - at));
}

const SafeTensor* SafeTensorsReader::find(const std::string& name) const {
  for (const SafeTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const SafeTensor& SafeTensorsReader::get(const std::string& name, const std::string& dtype) const {
  const SafeTensor* t = find(name);
  if (!t) throw FileError(fmt::format("{}: no tensor '{}'", path_, name));
  if (t->dtype != dtype) throw FileError(fmt::format("{}: tensor '{}' is {}, expected {}", path_, name, t->dtype, dtype));
  return *t;
}

std::vector<float> SafeTensorsReader::f32(const std::string& name) const {
  const SafeTensor& t = get(name, "F32");
  std::vector<float> v((t.end - t.begin) / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes_->data() + data_offset_ + t.begin, t.end - t.begin);
  return v;
}

std::vector<int64_t> SafeTensorsReader::i64(const std::string& name) const {
  const SafeTensor& t = get(name, "I64");
  std::vector<int64_t> v((t.end - t.begin) / sizeof(int64_t));
  if (!v.empty()) std::memcpy(v.data(), bytes_->data() + data_offset_ + t.begin, t.end - t.begin);
  return v;
}

uint32_t SafeTensorsReader::crc32() const { return crc32_of(bytes_->data(), bytes_->size()); }

}  // namespace trainer
