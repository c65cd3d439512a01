// llm.c's tokenizer file read into a table of token pieces (decode only, as llm.c's own sampler).
#include "core/data/tokenizer.h"

#include <fmt/format.h>

#include <cstring>

#include "core/data/dataset.h"
#include "core/data/util.h"

namespace trainer {

namespace {
constexpr uint32_t kMagic = 20240328;
constexpr size_t kHeader = 256 * sizeof(uint32_t);
constexpr uint32_t kMaxVocab = 1u << 24;
}  // namespace

TokenDecoder read_llmc_tokenizer(const std::string& path) {
  const data_util::MappedFile m = data_util::map_file(path);
  if (m.size < kHeader)
    throw DataError(fmt::format("{}: {} bytes, shorter than llm.c's {}-byte tokenizer header", path, m.size, kHeader));
  uint32_t h[4];
  std::memcpy(h, m.data, sizeof h);
  if (h[0] != kMagic)
    throw DataError(fmt::format("{}: offset 0: magic {}, not llm.c's tokenizer file ({})", path, h[0], kMagic));
  if (h[1] != 1 && h[1] != 2)
    throw DataError(fmt::format("{}: offset 4: tokenizer version {}; llm.c's are 1 and 2", path, h[1]));
  if (h[2] == 0 || h[2] > kMaxVocab)
    throw DataError(fmt::format("{}: offset 8: vocabulary size {} (1 to {})", path, h[2], kMaxVocab));
  TokenDecoder d;
  d.path = path;
  d.eot = h[1] == 1 ? 50256 : int32_t(h[3]);  // version 1 predates the field: GPT-2's
  if (d.eot < 0 || uint32_t(d.eot) >= h[2])
    throw DataError(fmt::format("{}: offset {}: end-of-text token {} outside the vocabulary of {}", path,
                                h[1] == 1 ? 8 : 12, d.eot, h[2]));
  d.pieces.reserve(h[2]);
  size_t at = kHeader;
  for (uint32_t i = 0; i < h[2]; ++i) {
    if (at >= m.size)
      throw DataError(fmt::format("{}: offset {}: the file ends after {} of its {} tokens", path, at, i, h[2]));
    const size_t n = m.data[at];
    if (n == 0) throw DataError(fmt::format("{}: offset {}: token {} has length 0", path, at, i));
    if (at + 1 + n > m.size)
      throw DataError(fmt::format("{}: offset {}: token {} needs {} bytes, the file ends after {}", path, at, i, n,
                                  m.size - at - 1));
    d.pieces.emplace_back(reinterpret_cast<const char*>(m.data + at + 1), n);
    at += 1 + n;
  }
  return d;
}

}  // namespace trainer
