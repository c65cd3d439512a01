#!/usr/bin/env python3
"""Peer baseline: the small transformer encoder of configs/transformer_sequences.yaml in PyTorch
(dense 32 -> 128 per step, learned positions, 2 pre-norm blocks of LayerNorm (eps 1e-3, Keras's),
nn.MultiheadAttention (4 heads of 32, batch_first, need_weights=False: PyTorch's fast path) and a
GELU MLP 128 -> 256 -> 128 with residual adds, LayerNorm, flatten, dense 16), trained with AdamW on
random [batch, 64, 32] sequences. Prints one JSON line like the other peers (same options).
Usage: transformer_torch.py [--batch 32] [--steps 20] [--warmup 3] [--device cpu|cuda] [--threads N]
       [--amp bf16|fp16] [--compile | --compile-mode ...]   (peer_common.py; --channels-last is taken and ignored)
"""
import torch
import torch.nn as nn

import peer_common

T, F, D, HEADS, MLP, CLASSES = 64, 32, 128, 4, 256, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-3), nn.LayerNorm(D, eps=1e-3)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, MLP), nn.GELU(), nn.Linear(MLP, D))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(F, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.blocks = nn.Sequential(Block(), Block())
        self.ln = nn.LayerNorm(D, eps=1e-3)
        self.head = nn.Linear(T * D, CLASSES)

    def forward(self, x):
        h = self.blocks(self.embed(x) + self.pos)
        return self.head(self.ln(h).flatten(1))


def main():
    a = peer_common.parser(__doc__, batch=32, steps=20).parse_args()
    dev = peer_common.setup(a)
    model = Encoder().to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, T, F, device=dev)
    y = torch.randint(0, CLASSES, (a.batch,), device=dev)
    warm, dt = peer_common.train(a, model, opt, x, y, dev)
    peer_common.report(a, dev, params, warm, dt, model="transformer_encoder", tokens_per_s=round(a.batch * T * a.steps / dt, 1))


if __name__ == "__main__":
    main()
