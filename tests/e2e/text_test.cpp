// End-to-end language modelling: a tiny GPT trained on a text file, `trainer generate` continuing it (greedy, seeded, streamed), and the refusals around per-position models.
#include <catch2/catch.hpp>

#include <string>

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
