#!/usr/bin/env python3
"""Peer baseline: the byte-level GPT of configs/gpt_bytes.yaml in PyTorch (token embedding 256 -> D,
learned positions, L pre-norm blocks of LayerNorm (eps 1e-3, Keras's), causal nn.MultiheadAttention
(H heads of D/H, batch_first, need_weights=False, is_causal with its mask: PyTorch's fused path) and a
GELU MLP D -> 4D -> D with residual adds, LayerNorm, a dense head of 256 next-byte scores at every
position), trained with AdamW (weight decay 0.01) on random byte windows, the loss the mean cross-
entropy over every position. Prints one JSON line like the other peers (same options), with
tokens_per_s.
Usage: gpt_torch.py [--batch 32] [--steps 20] [--warmup 3] [--device cpu|cuda] [--threads N]
       [--amp bf16|fp16] [--compile | --compile-mode ...] [--layers 4] [--width 128] [--heads 4]
       [--block 128]   (peer_common.py; --channels-last is taken and ignored)
"""
import inspect

import torch
import torch.nn as nn

import peer_common

VOCAB = 256


class Block(nn.Module):
    def __init__(self, d, heads, block):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-3), nn.LayerNorm(d, eps=1e-3)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), diagonal=1))
        # is_causal (PyTorch 2.0+) lets the fused kernels skip the masked half; 1.13 takes the mask alone.
        self.causal = {"is_causal": True} if "is_causal" in inspect.signature(self.attn.forward).parameters else {}

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False, **self.causal)[0]
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, layers, d, heads, block):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.randn(block, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, block) for _ in range(layers)])
        self.ln = nn.LayerNorm(d, eps=1e-3)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, idx):  # [B, T] ids -> [B*T, 256] scores (the loss's rows: every position)
        h = self.blocks(self.tok(idx) + self.pos)
        return self.head(self.ln(h)).reshape(-1, VOCAB)


def main():
    p = peer_common.parser(__doc__, batch=32, steps=20)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--block", type=int, default=128)
    a = p.parse_args()
    dev = peer_common.setup(a)
    model = Gpt(a.layers, a.width, a.heads, a.block).to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.randint(0, VOCAB, (a.batch, a.block), device=dev)
    y = torch.randint(0, VOCAB, (a.batch * a.block,), device=dev)
    warm, dt = peer_common.train(a, model, opt, x, y, dev)
    peer_common.report(a, dev, params, warm, dt, model="gpt_bytes", tokens_per_s=round(a.batch * a.block * a.steps / dt, 1))


if __name__ == "__main__":
    main()
