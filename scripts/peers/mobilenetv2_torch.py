#!/usr/bin/env python3
"""Peer baseline: MobileNetV2 (torchvision, width 1.0, 2 classes) trained with PyTorch on random
224x224 images: the referee for configs/mobilenetv2_cats_vs_dogs.yaml (same layers as Keras'
MobileNetV2: BN eps 1e-3, momentum 0.999 in Keras terms). Prints one JSON line like the
MiniGoogLeNet peer in ../shared/anchors (same options).
Usage: mobilenetv2_torch.py [--batch 16] [--steps 10] [--warmup 3] [--device cpu|cuda]
       [--threads N] [--channels-last] [--amp bf16|fp16] [--cudnn-benchmark]
       [--compile | --compile-mode default|reduce-overhead|max-autotune] [--size 224]   (peer_common.py)
"""
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import peer_common


class Clamp6(nn.Module):
    def forward(self, x):
        return torch.clamp(x, 0.0, 6.0)


def relu6_as_clamp(module):
    for name, child in module.named_children():
        if isinstance(child, nn.ReLU6):
            setattr(module, name, Clamp6())
        else:
            relu6_as_clamp(child)


def main():
    ap = peer_common.parser(__doc__, batch=16, steps=10)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    dev = peer_common.setup(a)
    # Keras' MobileNetV2 head has no dropout; torchvision's has Dropout(0.2) before the classifier.
    model = torchvision.models.mobilenet_v2(num_classes=2, dropout=0.0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps, m.momentum = 1e-3, 1e-3
    if a.amp == "bf16" and dev.type == "cpu":
        # PyTorch 1.13 has no bf16 backward for ReLU6 (hardtanh) on the CPU; clamp(x, 0, 6) is the
        # same function and has one.
        relu6_as_clamp(model)
    model = model.to(dev)
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=mf)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).to(memory_format=mf)
    y = torch.randint(0, 2, (a.batch,), device=dev)
    try:
        warm, dt = peer_common.train(a, model, opt, x, y, dev)
    except RuntimeError as e:  # an op without a kernel for this type on this device
        sys.exit(f"mobilenetv2_torch: PyTorch {torch.__version__} cannot train this model with --amp {a.amp} "
                 f"on {a.device}: {str(e).splitlines()[0]}")
    peer_common.report(a, dev, params, warm, dt, torchvision=torchvision.__version__, model="mobilenet_v2")


if __name__ == "__main__":
    main()
