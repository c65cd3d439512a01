// llm.c's tokenizer file (gpt2_tokenizer.bin from its dev/data scripts): each token id's bytes, to decode what a token model samples.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct TokenDecoder {
  std::string path;
  std::vector<std::string> pieces;  // token id -> its bytes (GPT-2's: UTF-8 pieces, "<|endoftext|>")
  int32_t eot = -1;                 // the end-of-text token: where llm.c starts a sample
  int64_t vocab() const { return int64_t(pieces.size()); }
};

// Reads llm.c's format (llmc/tokenizer.h): a header of 256 uint32 (magic 20240328; version 1, whose
// end-of-text id is GPT-2's 50256, or 2, whose is the header's fourth word; the vocabulary size),
// then for each token one length byte (1-255) and its bytes. A DataError naming the path and the
// byte offset of what is wrong (a missing file, another magic or version, a truncated entry).
TokenDecoder read_llmc_tokenizer(const std::string& path);

}  // namespace trainer
