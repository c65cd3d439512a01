// The transformer models the parallel invariants train, as a config's model section: a sequence classifier (dense per position, positions, a pre-norm block, a dense head) and a byte-level GPT (token embedding, positions, the block, a next-byte head per position).
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

namespace trainer::test {

// A pre-norm block reading the layer `pos`: layer norm, causal self-attention, a residual add,
// layer norm, a GELU MLP, a residual add (ending in `res2`).
#define TRAINER_TEST_BLOCK_LAYERS                                                              \
  "    - {name: ln1, type: layer_norm}\n"                                                      \
  "    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 4, causal: true}\n" \
  "    - {name: res1, type: add, inputs: [pos, attn]}\n"                                       \
  "    - {name: ln2, type: layer_norm}\n"                                                      \
  "    - {name: mlp, type: dense, units: 8}\n"                                                 \
  "    - {name: act, type: gelu}\n"                                                            \
  "    - {name: res2, type: add, inputs: [res1, act]}\n"

inline const char* const kTransformerBlockModel =
    "\nmodel:\n"
    "  input: [6, 5]\n"
    "  layers:\n"
    "    - {name: proj, type: dense, units: 8}\n"
    "    - {name: pos, type: position_embedding}\n" TRAINER_TEST_BLOCK_LAYERS
    "    - {name: flat, type: flatten}\n"
    "    - {name: dense, type: dense, units: 5}\n"
    "    - {name: softmax, type: softmax}\n";

// Six byte ids in, the next byte's 256 scores at each of the six positions out (labels [6]).
inline const char* const kGptModel =
    "\nmodel:\n"
    "  input: [6]\n"
    "  layers:\n"
    "    - {name: tok, type: embedding, input_dim: 256, output_dim: 8}\n"
    "    - {name: pos, type: position_embedding}\n" TRAINER_TEST_BLOCK_LAYERS
    "    - {name: ln, type: layer_norm}\n"
    "    - {name: head, type: dense, units: 256}\n"
    "    - {name: softmax, type: softmax}\n";

#undef TRAINER_TEST_BLOCK_LAYERS

inline const std::string& gpt_text_path() {
  static const std::string p = "/tmp/trainer-test-text-" + std::to_string(::getpid()) + ".txt";
  return p;
}

// A text file of 4000 bytes of pseudo-random words (a fixed seed) for the GPT's `text` set,
// written once per process under /tmp and removed at its exit; its path.
inline std::string gpt_text_file() {
  static const std::string path = [] {
    const std::string& p = gpt_text_path();
    const size_t bytes = 4000;
    const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran.\n", "Why? "};
    std::mt19937 rng(7);
    std::string text;
    while (text.size() < bytes) text += words[rng() % 10];
    FILE* f = std::fopen(p.c_str(), "wb");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
      throw std::runtime_error("cannot write " + p);
    std::atexit([] { std::remove(gpt_text_path().c_str()); });
    return p;
  }();
  return path;
}

}  // namespace trainer::test
