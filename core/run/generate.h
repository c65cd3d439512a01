// Sampling from a language model's checkpoint (`trainer generate`): a prompt, then one byte (or
// token, decoded by llm.c's tokenizer file) at a time from the model's next-position distribution
// (temperature, top-k).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"

namespace trainer {

struct GenerateOptions {
  std::string prompt = "\n";           // a byte model's context (bytes; empty: "\n")
  std::string tokenizer;               // a token model's: llm.c's tokenizer file (tokens -> bytes)
  std::vector<int32_t> prompt_tokens;  // a token model's context (ids; empty: the tokenizer's end-of-text)
  bool ids = false;                    // print the sampled ids ("464 2068 "), not their text: a token model
                                       // without its tokenizer file (then prompt_tokens is required)
  int64_t count = 300;                 // how many bytes (tokens) to sample
  double temperature = 1.0;            // logits divided by it before the softmax; 0: always the most likely
  int top_k = 0;                       // sample among the k most likely only (0: all)
  uint64_t seed = 0;                   // the sampling's random stream (the same seed, the same text)
  LoadWeights weights = LoadWeights::Average;
};

struct Generated {
  std::string prompt;            // the context's text (a token prompt decoded)
  std::string text;              // the sampled bytes (a token model's decoded), without the prompt
  std::vector<int32_t> tokens;   // the sampled ids (bytes or tokens)
  int64_t window = 0;            // the model's positions: the context it sees is the last `window` ids
  int64_t vocab = 256;           // the ids sampled among: 256 bytes, or the tokenizer's vocabulary
  bool averaged = false;         // the weights were the moving average (train.ema)
  std::string device;
};

// The model must score every position of one input of ids ([T] in, [T, V] logits) and be causal
// (every multi_head_attention `causal: true`): the context fills positions 0..n-1 of the window and
// the scores at n-1 give the next id, whatever the rest of the window holds. V is 256 (bytes)
// without a tokenizer (any V with `ids`); with one, V must hold its vocabulary (the ids past it,
// such as llm.c's padding to 50304, are never sampled). A ConfigError (naming the checkpoint) otherwise; a
// DataError for the tokenizer file. `on_piece` (may be empty) gets the prompt's text first, then each
// sampled id's as it comes.
Generated generate_text(const RunSpec& e, const CheckpointInfo& c, const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_piece);

}  // namespace trainer
