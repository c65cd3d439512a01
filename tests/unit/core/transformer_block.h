// The transformer block the parallel invariants train (dense per position, positions, layer norm, causal self-attention, a GELU MLP, residual adds), as a config's model section.
#pragma once

namespace trainer::test {

inline const char* const kTransformerBlockModel = R"(
model:
  input: [6, 5]
  layers:
    - {name: proj, type: dense, units: 8}
    - {name: pos, type: position_embedding}
    - {name: ln1, type: layer_norm}
    - {name: attn, type: multi_head_attention, num_heads: 2, key_dim: 4, causal: true}
    - {name: res1, type: add, inputs: [pos, attn]}
    - {name: ln2, type: layer_norm}
    - {name: mlp, type: dense, units: 8}
    - {name: act, type: gelu}
    - {name: res2, type: add, inputs: [res1, act]}
    - {name: flat, type: flatten}
    - {name: dense, type: dense, units: 5}
    - {name: softmax, type: softmax}
)";

}  // namespace trainer::test
