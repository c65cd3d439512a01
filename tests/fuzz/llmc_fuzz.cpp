// libFuzzer target for llm.c's binary files: a token shard (`type: tokens`) and a tokenizer file (`trainer generate --tokenizer`).
//
// fuzz::split cuts the input into shard.bin and tokenizer.bin. The shard is opened as a `tokens` set
// (windows of 8, vocabulary 300) whose first windows and labels are read; the tokenizer is read
// whole. DataError and ConfigError are the documented refusals; anything else is a crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/data/tokenizer.h"
#include "fuzz_util.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::Split s = fuzz::split(data, size);
  fuzz::write_file("llmc/shard.bin", s.first, s.first_size);
  const std::string tok = fuzz::write_file("llmc/tokenizer.bin", s.second, s.second_size);
  fuzz::refusals_expected([] {
    auto ds = fuzz::open_dataset("{type: tokens, path: llmc/shard.bin, block_size: 8, vocab: 300}");
    std::vector<float> x(size_t(ds->sample_shape().numel()));
    std::vector<int32_t> y(size_t(std::max<int64_t>(ds->label_shape().numel(), 1)));
    for (int64_t i = 0; i < std::min<int64_t>(ds->size(), 16); ++i) ds->get_f32_labels(i, x.data(), y.data());
  });
  fuzz::refusals_expected([&] {
    const TokenDecoder d = read_llmc_tokenizer(tok);
    size_t bytes = 0;
    for (const std::string& p : d.pieces) bytes += p.size();
    if (d.eot < 0 || d.eot >= d.vocab() || bytes + size_t(d.vocab()) + 1024 > s.second_size) __builtin_trap();
  });
  return 0;
}
