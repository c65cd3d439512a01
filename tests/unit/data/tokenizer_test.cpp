// Tests of llm.c's tokenizer file reader (`trainer generate --tokenizer`): versions 1 and 2, and every refusal naming the path and byte offset.
#include "core/data/tokenizer.h"

#include <catch2/catch.hpp>

#include <string>

#include "core/data/dataset.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::error_of;
using trainer::test::TempDir;

namespace {

// llm.c's header: 256 little-endian uint32, the first ones given.
std::vector<uint8_t> header(const std::vector<uint32_t>& w) {
  std::vector<uint8_t> s(1024, 0);
  for (size_t i = 0; i < w.size(); ++i)
    for (int b = 0; b < 4; ++b) s[i * 4 + size_t(b)] = uint8_t((w[i] >> (8 * b)) & 0xff);
  return s;
}

void add_piece(std::vector<uint8_t>& f, const std::string& piece) {
  f.push_back(uint8_t(piece.size()));
  f.insert(f.end(), piece.begin(), piece.end());
}

std::string failure(const std::string& path) {
  return error_of<DataError>([&] { read_llmc_tokenizer(path); });
}

}  // namespace

TEST_CASE("llm.c tokenizer: version 2 gives each id's bytes and the header's end-of-text id, version 1 GPT-2's 50256") {
  TempDir d;
  std::vector<uint8_t> v2 = header({20240328, 2, 3, 2});
  for (const char* p : {"Hello", " world", "<|endoftext|>"}) add_piece(v2, p);
  trainer::test::write_bytes(d / "v2.bin", v2);
  const TokenDecoder t = read_llmc_tokenizer(d / "v2.bin");
  CHECK(t.vocab() == 3);
  CHECK(t.eot == 2);
  CHECK(t.pieces[0] + t.pieces[1] == "Hello world");
  CHECK(t.pieces[2] == "<|endoftext|>");
  std::vector<uint8_t> v1 = header({20240328, 1, 50257});
  for (int i = 0; i < 50257; ++i) add_piece(v1, std::string(1, char('a' + i % 26)));
  trainer::test::write_bytes(d / "v1.bin", v1);
  const TokenDecoder g = read_llmc_tokenizer(d / "v1.bin");
  CHECK(g.vocab() == 50257);
  CHECK(g.eot == 50256);
  CHECK(g.pieces[27] == "b");
}

TEST_CASE("llm.c tokenizer: a wrong magic, version, size or end-of-text id, and a cut or empty entry, name the file and offset") {
  TempDir d;
  const std::string p = d / "t.bin";
  trainer::test::write_bytes(p, {1, 2, 3});
  CHECK(failure(p) == p + ": 3 bytes, shorter than llm.c's 1024-byte tokenizer header");
  trainer::test::write_bytes(p, header({20240520, 1, 3}));
  CHECK(failure(p) == p + ": offset 0: magic 20240520, not llm.c's tokenizer file (20240328)");
  trainer::test::write_bytes(p, header({20240328, 3, 3}));
  CHECK(failure(p) == p + ": offset 4: tokenizer version 3; llm.c's are 1 and 2");
  trainer::test::write_bytes(p, header({20240328, 2, 0}));
  CHECK(failure(p) == p + ": offset 8: vocabulary size 0 (1 to 16777216)");
  trainer::test::write_bytes(p, header({20240328, 2, 3, 3}));
  CHECK(failure(p) == p + ": offset 12: end-of-text token 3 outside the vocabulary of 3");
  trainer::test::write_bytes(p, header({20240328, 1, 3}));
  CHECK(failure(p) == p + ": offset 8: end-of-text token 50256 outside the vocabulary of 3");
  std::vector<uint8_t> f = header({20240328, 2, 3, 0});
  add_piece(f, "ab");
  std::vector<uint8_t> empty = f;
  empty.push_back(0);
  trainer::test::write_bytes(p, empty);
  CHECK(failure(p) == p + ": offset 1027: token 1 has length 0");
  add_piece(f, "cde");
  trainer::test::write_bytes(p, f);
  CHECK(failure(p) == p + ": offset 1031: the file ends after 2 of its 3 tokens");
  f.push_back(5);
  f.push_back('x');
  trainer::test::write_bytes(p, f);
  CHECK(failure(p) == p + ": offset 1031: token 2 needs 5 bytes, the file ends after 1");
  CHECK_THAT(failure(d / "missing.bin"), Catch::Contains("missing.bin"));
}
