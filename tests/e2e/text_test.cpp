// End-to-end language modelling: a tiny GPT trained on a text file (and one on llm.c token shards), `trainer generate` continuing it (greedy, seeded, streamed; tokens decoded by llm.c's tokenizer file), and the refusals around per-position models.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"

namespace {

// One phrase over and over: a one-block GPT learns to continue it within a few hundred steps.
const char* kPhrase = "the cat sat on the mat. ";

const char* kTextData = R"(data:
  train: {type: text, path: corpus.txt, block_size: 16, stride: 5, range: [0.0, 0.9]}
  val:   {type: text, path: corpus.txt, block_size: 16, range: [0.9, 1.0]}
)";

std::string gpt_config(const std::string& extra_layers = "", bool causal = true, const std::string& data = kTextData) {
  return std::string(R"(
name: tiny_gpt
seed: 2
model:
  input: [16]
  layers:
    - {name: tok, type: embedding, input_dim: 256, output_dim: 32}
    - {name: pos, type: position_embedding}
    - {name: ln1, type: layer_norm}
    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 16, causal: )") +
         (causal ? "true" : "false") + R"(}
    - {name: res1, type: add, inputs: [pos, attn]}
    - {name: ln2, type: layer_norm}
    - {name: up, type: dense, units: 64}
    - {name: gelu, type: gelu}
    - {name: down, type: dense, units: 32}
    - {name: res2, type: add, inputs: [res1, down]}
    - {name: ln, type: layer_norm}
)" + extra_layers + R"(    - {name: head, type: dense, units: 256}
    - {name: softmax, type: softmax}
)" + data + R"(train: {epochs: 4, batch_size: 16, steps_per_epoch: 40}
optimizer: {type: adam, lr: 0.01}
)";
}

std::string corpus() {
  std::string text;
  while (text.size() < 6000) text += kPhrase;
  return text;
}

}  // namespace

TEST_CASE("e2e text: a tiny GPT learns a text file, and generate continues it (greedy: the phrase, seeded: reproducible)") {
  const std::string dir = e2e::temp_dir("text");
  e2e::write_file(dir + "/corpus.txt", corpus());
  e2e::write_file(dir + "/gpt.yaml", gpt_config());
  auto r = e2e::trainer("run gpt.yaml --run-dir run", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("text ") && Catch::Contains("windows of 16 bytes"));
  auto m = e2e::last_metrics(dir + "/run");
  // Unigram entropy of the phrase's bytes is ~2.6 nats; a model that learned the phrase is near 0
  // (the first positions of a window have little context: not exactly 0).
  WARN("tiny GPT on a repeated phrase, 4 x 40 steps: val_loss " << m["val_loss"] << ", val_accuracy "
                                                                << m["val_accuracy"] << " (per position)");
  CHECK(m["val_loss"] < 0.5);
  CHECK(m["val_accuracy"] > 0.85);

  auto g = e2e::trainer("generate run --prompt 'the cat s' --bytes 30 --temperature 0 --quiet", dir);
  INFO(g.out << g.err);
  REQUIRE(g.code == 0);
  CHECK(g.err.empty());
  CHECK(g.out == "the cat sat on the mat. the cat sat on \n");
  // Sampling: the same seed, the same text; the checkpoint line on stderr without --quiet.
  auto s1 = e2e::trainer("generate run --bytes 60 --temperature 1.5 --top-k 5 --seed 4", dir);
  auto s2 = e2e::trainer("generate run --bytes 60 --temperature 1.5 --top-k 5 --seed 4", dir);
  auto s3 = e2e::trainer("generate run --bytes 60 --temperature 1.5 --top-k 5 --seed 5", dir);
  REQUIRE(s1.code == 0);
  CHECK(s1.out == s2.out);
  CHECK(s1.out != s3.out);
  CHECK(s1.out.size() == 1 + 60 + 1);  // the default prompt "\n", 60 bytes, a final line break
  CHECK_THAT(s1.err, Catch::Contains("Checkpoint: ") && Catch::Contains("sampling 60 bytes at temperature 1.5, top-k 5, seed 4") &&
                         Catch::Contains("a window of 16 bytes"));

  // eval counts positions; its confusion matrix is the vocabulary's (256 x 256 bytes here).
  auto ev = e2e::trainer("eval run --confusion", dir);
  INFO(ev.out << ev.err);
  REQUIRE(ev.code == 0);
  CHECK_THAT(ev.out, Catch::Contains(" positions - loss: ") && Catch::Contains("Confusion matrix"));
  // A language model is not a classifier: predict says what to use.
  e2e::write_file(dir + "/x.npy", "");
  auto p = e2e::trainer("predict run x.npy", dir);
  CHECK(p.code == 2);
  CHECK_THAT(p.err, Catch::Contains("scores each of 16 positions (a language model): `trainer generate` samples text"));
}

TEST_CASE("e2e text: generate refuses a model that is not a causal byte-level language model") {
  const std::string dir = e2e::temp_dir("text_refuse");
  e2e::write_file(dir + "/corpus.txt", corpus());
  e2e::write_file(dir + "/gpt.yaml", gpt_config("", false));
  auto r = e2e::trainer("run gpt.yaml --run-dir run --set train.epochs=1 --set train.steps_per_epoch=2", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto g = e2e::trainer("generate run --bytes 5", dir);
  CHECK(g.code == 2);
  CHECK_THAT(g.err, Catch::Contains("layer 'attn' attends to later positions (causal: false)"));
  auto smoke = e2e::trainer("run '" TRAINER_SOURCE_DIR "/configs/smoke.yaml' --run-dir smoke --set train.epochs=1 "
                            "--set train.steps_per_epoch=1",
                            dir);
  REQUIRE(smoke.code == 0);
  auto c = e2e::trainer("generate smoke --bytes 5", dir);
  CHECK(c.code == 2);
  CHECK_THAT(c.err, Catch::Contains("the model scores whole samples, not each position"));
}

TEST_CASE("e2e text: a per-position model needs per-position labels, and a text set needs scores per position") {
  const std::string dir = e2e::temp_dir("text_shapes");
  e2e::write_file(dir + "/corpus.txt", corpus());
  // A text set under a classifier head (flatten, dense 256): one score vector per sample.
  e2e::write_file(dir + "/flat.yaml", gpt_config("    - {name: flat, type: flatten}\n"));
  auto f = e2e::trainer("run flat.yaml", dir);
  CHECK(f.code == 2);
  CHECK_THAT(f.err, Catch::Contains("flat.yaml:") && Catch::Contains("this set labels each of a sample's 16 positions, but "
                                                                     "the model's output 'softmax' is 256"));
  // Synthetic images (one label each) under a model that scores positions.
  e2e::write_file(dir + "/img.yaml", gpt_config("", true, "data:\n  train: {type: synthetic, size: 32}\n"));
  auto i = e2e::trainer("run img.yaml", dir);
  CHECK(i.code == 2);
  CHECK_THAT(i.err, Catch::Contains("img.yaml:") &&
                        Catch::Contains("the model's output 'softmax' scores every position (16x256), but this set "
                                        "gives one label per sample (per-position labels come from a `text` set)"));
}

namespace {

// n little-endian 32-bit words, as llm.c's headers hold them.
std::string words(const std::vector<uint32_t>& w, size_t n = 256) {
  std::string s(n * 4, '\0');
  for (size_t i = 0; i < w.size(); ++i)
    for (int b = 0; b < 4; ++b) s[i * 4 + size_t(b)] = char((w[i] >> (8 * b)) & 0xff);
  return s;
}

}  // namespace

// A token model: an llm.c shard of 12 token ids counting 0, 1, ..., 11, 0, ... (`type: tokens`),
// and llm.c's tokenizer file (version 2: its end-of-text id in the header) naming token i "t<i> ".
// generate decodes the sampled ids with it: greedy from "t3 t4" the count goes on; by default it
// starts from the end-of-text token; --ids prints the ids without the file; the prompt and
// tokenizer options refuse what they cannot do.
TEST_CASE("e2e text: generate samples a token model's ids and decodes them with llm.c's tokenizer file") {
  const std::string dir = e2e::temp_dir("tokens");
  std::string shard = words({20240520, 1, 3000});
  for (uint32_t i = 0; i < 3000; ++i) shard += std::string{char(i % 12), '\0'};
  e2e::write_file(dir + "/count.bin", shard);
  std::string tok = words({20240328, 2, 12, 11});
  for (int i = 0; i < 12; ++i) {
    const std::string piece = "t" + std::to_string(i) + " ";
    tok += char(piece.size()) + piece;
  }
  e2e::write_file(dir + "/tok.bin", tok);
  std::string yaml = gpt_config("", true, "data:\n  train: {type: tokens, path: count.bin, block_size: 16, stride: 7, vocab: 12}\n");
  for (const char* from : {"input_dim: 256", "units: 256"}) {
    std::string to = from;
    to.replace(to.find("256"), 3, "12");
    yaml.replace(yaml.find(from), std::string(from).size(), to);
  }
  e2e::write_file(dir + "/gpt.yaml", yaml);
  auto r = e2e::trainer("run gpt.yaml --run-dir run", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto g = e2e::trainer("generate run --tokenizer tok.bin --prompt-tokens '3 4' --tokens 6 --temperature 0 --quiet", dir);
  INFO(g.out << g.err);
  REQUIRE(g.code == 0);
  CHECK(g.out == "t3 t4 t5 t6 t7 t8 t9 t10 \n");
  auto d = e2e::trainer("generate run --tokenizer tok.bin --tokens 3 --temperature 0 --quiet", dir);  // after end-of-text (11): 0
  INFO(d.out << d.err);
  REQUIRE(d.code == 0);
  CHECK(d.out == "t0 t1 t2 \n");
  // Without the tokenizer file: the ids themselves, from a token prompt (there is no known end-of-text).
  auto ids = e2e::trainer("generate run --ids --prompt-tokens 3,4 --tokens 3 --temperature 0 --quiet", dir);
  INFO(ids.out << ids.err);
  REQUIRE(ids.code == 0);
  CHECK(ids.out == "3 4 5 6 7 \n");
  auto no_start = e2e::trainer("generate run --ids --tokens 3", dir);
  CHECK(no_start.code == 2);
  CHECK_THAT(no_start.err, Catch::Contains("--ids: a model without its tokenizer starts from --prompt-tokens"));
  auto no_tok = e2e::trainer("generate run --tokens 3", dir);
  CHECK(no_tok.code == 2);
  CHECK_THAT(no_tok.err, Catch::Contains("the model scores 12 classes per position: generate samples bytes") &&
                             Catch::Contains("--tokenizer"));
  auto text_prompt = e2e::trainer("generate run --tokenizer tok.bin --prompt hello", dir);
  CHECK(text_prompt.code == 2);
  CHECK_THAT(text_prompt.err, Catch::Contains("--prompt: text is a byte-level model's prompt"));
  auto bad_id = e2e::trainer("generate run --tokenizer tok.bin --prompt-tokens 3,x", dir);
  CHECK(bad_id.code == 2);
  CHECK_THAT(bad_id.err, Catch::Contains("--prompt-tokens: 'x' is not a token id"));
  auto far_id = e2e::trainer("generate run --tokenizer tok.bin --prompt-tokens 12", dir);
  CHECK(far_id.code == 2);
  CHECK_THAT(far_id.err, Catch::Contains("tok.bin: prompt token 12 is outside its 12 tokens"));
  e2e::write_file(dir + "/short.bin", tok.substr(0, tok.size() - 2));
  auto cut = e2e::trainer("generate run --tokenizer short.bin", dir);
  CHECK(cut.code == 3);
  CHECK_THAT(cut.err, Catch::Contains("short.bin: offset") && Catch::Contains("token 11 needs 4 bytes, the file ends after 2"));
}
