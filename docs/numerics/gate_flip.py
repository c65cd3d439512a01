#!/usr/bin/env python3
"""The conv-wgrad-f32 repro (../shared/repro/conv-wgrad-f32) in float64 PyTorch, to Keras's definitions.

Usage: /usr/bin/python3 gate_flip.py REPRO_DIR CHECKPOINT_AFTER_STEP_2 [A_STEP_3 B_STEP_3]
  REPRO_DIR: the folder with x.npy and y.npy; CHECKPOINT: a run's checkpoints/epoch-0002.safetensors
  (any of the repro's three runs: they agree to 3e-8 there). With two runs' step-3 checkpoints (the
  gate closed in A, open in B) it also prints how far A - B is from lr x (gradient(open) -
  gradient(closed)), the largest over every tensor: the flip's share of their difference.
Prints step 3's loss, the block1/depthwise batch-norm output nearest 6 (ReLU6's upper bound), and
lr x the difference of step 3's gradient with that one ReLU6 gate open (float64's side: the value is
below 6) and closed (the side a float32 run takes when its rounding lands on 6.0). See README.md.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
LR = 0.1


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or "moving" in name or name.startswith("optimizer"):
            continue
        b, e = t["data_offsets"]
        a = np.frombuffer(raw[8 + n + b : 8 + n + e], dtype=np.float32).reshape(t["shape"])
        out[name] = torch.tensor(a.astype(np.float64), requires_grad=True)
    return out


def same(x, k, s):
    """Keras 'same' padding: the odd pixel at the bottom/right."""
    o = -(-x.shape[2] // s)
    p = max((o - 1) * s + k - x.shape[2], 0)
    return F.pad(x, (p // 2, p - p // 2, p // 2, p - p // 2))


def conv(x, k, s=1):  # k: HWIO
    return F.conv2d(same(x, k.shape[0], s), k.permute(3, 2, 0, 1), stride=s)


def depthwise(x, k, s=1, pad=True):  # k: [H, W, C, M]
    c, m = k.shape[2], k.shape[3]
    w = k.permute(2, 3, 0, 1).reshape(c * m, 1, k.shape[0], k.shape[1])
    return F.conv2d(same(x, k.shape[0], s) if pad else x, w, stride=s, groups=c)


def relu6(x, closed=None):
    """ReLU6 with its gradient passing where 0 < x < 6; `closed`: one flat index whose gate is shut."""
    gate = (x > 0) & (x < 6)
    if closed is not None:
        gate = gate.reshape(-1).clone()
        gate[closed] = False
        gate = gate.reshape(x.shape)
    return torch.where(gate, x, x.clamp(0, 6).detach())


def step3_loss(W, x, y, close_nearest):
    bn = lambda h, p: F.batch_norm(h, None, None, W[p + "/gamma"], W[p + "/beta"], True, 0.0, 1e-3)
    h = relu6(bn(conv(x, W["stem/conv/kernel"], 2), "stem/bn"))
    stem = h
    h = relu6(bn(conv(h, W["block1/expand/conv/kernel"]), "block1/expand/bn"))
    pre = bn(depthwise(h, W["block1/depthwise/depthwise/depthwise_kernel"]), "block1/depthwise/bn")
    i = int(torch.argmin((pre - 6).abs()))
    h = relu6(pre, i if close_nearest else None)
    h = bn(conv(h, W["block1/project/conv/kernel"]), "block1/project/bn") + stem
    h = relu6(bn(conv(h, W["block2/expand/conv/kernel"]), "block2/expand/bn"))
    h = F.pad(h, (0, 1, 0, 1))
    h = relu6(bn(depthwise(h, W["block2/depthwise/depthwise/depthwise_kernel"], 2, False), "block2/depthwise/bn"))
    h = bn(conv(h, W["block2/project/conv/kernel"]), "block2/project/bn")
    h = relu6(depthwise(h, W["head_dw/depthwise_kernel"], 2) + W["head_dw/bias"][:, None, None])
    z = h.mean((2, 3)) @ W["dense/kernel"] + W["dense/bias"]
    return F.cross_entropy(z, y), float(pre.reshape(-1)[i])


def main():
    repro, ckpt = sys.argv[1].rstrip("/"), sys.argv[2]
    x = torch.tensor(np.load(repro + "/x.npy").astype(np.float64)).permute(0, 3, 1, 2)
    y = torch.tensor(np.load(repro + "/y.npy").astype(np.int64))
    grads = []
    for close in (False, True):
        W = load(ckpt)
        loss, nearest = step3_loss(W, x, y, close)
        loss.backward()
        grads.append({k: v.grad for k, v in W.items()})
        print(f"step 3, gate {'closed' if close else 'open'}: loss {loss.item():.7f}; "
              f"block1/depthwise batch norm output nearest 6: {nearest:.10f} (6 - {6 - nearest:.3e})")
    print(f"lr ({LR}) x |gradient(open) - gradient(closed)|, largest per tensor (over 1e-7):")
    for k in grads[0]:
        d = LR * float((grads[0][k] - grads[1][k]).abs().max())
        if d > 1e-7:
            print(f"  {k:<45} {d:.3e}")
    if len(sys.argv) == 5:
        a, b = load(sys.argv[3]), load(sys.argv[4])
        raw = max(float((a[k] - b[k]).abs().max()) for k in grads[0])
        rest = max(float((a[k] - b[k] - LR * (grads[0][k] - grads[1][k])).abs().max()) for k in grads[0])
        print(f"max |A - B| {raw:.3e}; max |(A - B) - lr x (gradient(open) - gradient(closed))| {rest:.3e}")


if __name__ == "__main__":
    main()
