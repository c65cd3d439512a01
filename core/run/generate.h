// Sampling text from a byte-level language model's checkpoint (`trainer generate`): a prompt,
// then one byte at a time from the model's next-byte distribution (temperature, top-k).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"

namespace trainer {

struct GenerateOptions {
  std::string prompt = "\n";  // the context the sample continues (bytes; empty: "\n")
  int64_t bytes = 300;        // how many bytes to sample
  double temperature = 1.0;   // logits divided by it before the softmax; 0: always the most likely byte
  int top_k = 0;              // sample among the k most likely bytes only (0: all 256)
  uint64_t seed = 0;          // the sampling's random stream (the same seed, the same text)
  LoadWeights weights = LoadWeights::Average;
};

struct Generated {
  std::string text;       // the sampled bytes (without the prompt)
  int64_t window = 0;     // the model's positions: the context it sees is the last `window` bytes
  bool averaged = false;  // the weights were the moving average (train.ema)
  std::string device;
};

// The model must score every position of one input of byte ids ([T] in, [T, 256] logits) and be
// causal (every multi_head_attention `causal: true`): the context fills positions 0..n-1 of the
// window and the scores at n-1 give the next byte, whatever the rest of the window holds. A
// ConfigError (naming the checkpoint) otherwise. Each sampled byte is passed to `on_byte` as it
// comes (may be empty).
Generated generate_text(const RunSpec& e, const CheckpointInfo& c, const GenerateOptions& o,
                        const std::function<void(char)>& on_byte);

}  // namespace trainer
