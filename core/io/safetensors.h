// safetensors files (the Hugging Face format PyTorch and NumPy read without this tool): an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the tensors' bytes. Written atomically; every read is checked against corruption.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trainer {

struct SafeTensor {
  std::string name;
  std::string dtype;            // "F32", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

// Collects tensors (copied) and writes them in the order added.
class SafeTensorsWriter {
 public:
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void add_i64(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t size() const { return tensors_.size(); }
  // The complete file's bytes.
  std::string serialize() const;
  // Writes `path` atomically (AtomicFile); returns the number of bytes and their CRC-32.
  std::pair<uint64_t, uint32_t> write(const std::string& path) const;

 private:
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape, const void* data,
           size_t bytes);
  std::vector<SafeTensor> tensors_;
  std::string data_;
  std::map<std::string, std::string> metadata_;
};

// A whole file read into memory and checked: header length, JSON, dtypes, shapes against byte
// ranges, ranges inside the data section without overlaps or holes. Problems are FileErrors
// naming the path and the byte offset.
class SafeTensorsReader {
 public:
  explicit SafeTensorsReader(const std::string& path);
  // The bytes of `path` read earlier (a checkpoint chosen, then pruned by a live run, stays readable).
  SafeTensorsReader(const std::string& path, std::shared_ptr<const std::string> bytes);
  const std::string& path() const { return path_; }
  const std::shared_ptr<const std::string>& bytes() const { return bytes_; }
  const std::vector<SafeTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafeTensor* find(const std::string& name) const;  // null when absent
  // An F32 tensor's values (FileError when absent or of another dtype).
  std::vector<float> f32(const std::string& name) const;
  std::vector<int64_t> i64(const std::string& name) const;
  uint64_t file_bytes() const { return bytes_->size(); }
  uint32_t crc32() const;

 private:
  const SafeTensor& get(const std::string& name, const std::string& dtype) const;
  void parse();
  std::string path_;
  std::shared_ptr<const std::string> bytes_;
  uint64_t data_offset_ = 0;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace trainer
