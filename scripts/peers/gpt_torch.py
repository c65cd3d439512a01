#!/usr/bin/env python3
"""Peer baseline: the byte-level GPT of configs/gpt_bytes.yaml in PyTorch (token embedding 256 -> D,
learned positions, L pre-norm blocks of LayerNorm (eps 1e-3, Keras's), causal nn.MultiheadAttention
(H heads of D/H, batch_first, need_weights=False, is_causal with its mask: PyTorch's fused path) and a
GELU MLP D -> 4D -> D with residual adds, LayerNorm, a dense head of 256 next-byte scores at every
position), trained with AdamW (weight decay 0.01) on random byte windows, the loss the mean cross-
entropy over every position. Prints one JSON line like the other peers (same options), with
tokens_per_s.
With --vocab 50257 --tie --gelu tanh --ln-eps 1e-5 --layers 12 --width 768 --heads 12 --block 1024
it is GPT-2 small as configs/gpt2_124m.yaml (the head tied to the token embedding, no bias).
Usage: gpt_torch.py [--batch 32] [--steps 20] [--warmup 3] [--device cpu|cuda] [--threads N]
       [--amp bf16|fp16] [--compile | --compile-mode ...] [--layers 4] [--width 128] [--heads 4]
       [--block 128] [--vocab 256] [--tie] [--gelu exact|tanh] [--ln-eps 1e-3]
       (peer_common.py; --channels-last is taken and ignored)
"""
import inspect

import torch
import torch.nn as nn

import peer_common

class Block(nn.Module):
    def __init__(self, d, heads, block, gelu, eps):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh" if gelu == "tanh" else "none"),
                                 nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), diagonal=1))
        # is_causal (PyTorch 2.0+) lets the fused kernels skip the masked half; 1.13 takes the mask alone.
        self.causal = {"is_causal": True} if "is_causal" in inspect.signature(self.attn.forward).parameters else {}

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False, **self.causal)[0]
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.vocab = a.vocab
        self.tok = nn.Embedding(a.vocab, a.width)
        self.pos = nn.Parameter(torch.randn(a.block, a.width) * 0.02)
        self.blocks = nn.Sequential(*[Block(a.width, a.heads, a.block, a.gelu, a.ln_eps) for _ in range(a.layers)])
        self.ln = nn.LayerNorm(a.width, eps=a.ln_eps)
        self.head = nn.Linear(a.width, a.vocab, bias=not a.tie)
        if a.tie:  # GPT-2's tied output projection
            self.head.weight = self.tok.weight

    def forward(self, idx):  # [B, T] ids -> [B*T, vocab] scores (the loss's rows: every position)
        h = self.blocks(self.tok(idx) + self.pos)
        return self.head(self.ln(h)).reshape(-1, self.vocab)


def main():
    p = peer_common.parser(__doc__, batch=32, steps=20)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--tie", action="store_true", help="the head's weight is the token embedding's (GPT-2)")
    p.add_argument("--gelu", choices=("exact", "tanh"), default="exact")
    p.add_argument("--ln-eps", type=float, default=1e-3)
    a = p.parse_args()
    dev = peer_common.setup(a)
    model = Gpt(a).to(dev)
    params = sum(p.numel() for p in model.parameters())
    kw = {"lr": 1e-3, "weight_decay": 0.01}
    if dev.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        kw["fused"] = True  # one kernel for the update, as a careful GPU user runs it (PyTorch 2.x)
    opt = torch.optim.AdamW(model.parameters(), **kw)
    x = torch.randint(0, a.vocab, (a.batch, a.block), device=dev)
    y = torch.randint(0, a.vocab, (a.batch * a.block,), device=dev)
    warm, dt = peer_common.train(a, model, opt, x, y, dev)
    peer_common.report(a, dev, params, warm, dt, model="gpt2_124m" if a.vocab == 50257 else "gpt_bytes", tokens_per_s=round(a.batch * a.block * a.steps / dt, 1))


if __name__ == "__main__":
    main()
