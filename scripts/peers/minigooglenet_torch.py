#!/usr/bin/env python3
"""Peer baseline: MiniGoogLeNet (CIFAR-10 shape) trained with PyTorch on CPU or GPU.

A copy of ../shared/anchors/minigooglenet_torch.py (the same model and step) that also reports the
peak GPU memory PyTorch's caching allocator reserved (peak_device_mb), for bench-vs-pytorch.sh.
Prints one JSON line with training throughput (images/s) over timed steps, after warm-up.
Same architecture as the PyImageSearch Keras multi-GPU article (2017): conv(96) -> incep(32,32) -> incep(32,48) -> down(80)
-> incep(112,48) -> incep(96,64) -> incep(80,80) -> incep(48,96) -> down(96)
-> incep(176,160) -> incep(176,160) -> avgpool 7 -> dropout 0.5 -> dense(10).
Usage: minigooglenet_torch.py [--batch 64] [--steps 20] [--warmup 3] [--device cpu|cuda]
       [--threads N] [--channels-last] [--amp bf16|fp16] [--cudnn-benchmark]
       [--compile | --compile-mode default|reduce-overhead|max-autotune]   (peer_common.py)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_common


class ConvBN(nn.Module):
    def __init__(self, cin, cout, k, stride=1, pad="same"):
        super().__init__()
        p = k // 2 if pad == "same" else 0
        self.conv = nn.Conv2d(cin, cout, k, stride, p)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    def __init__(self, cin, k1, k3):
        super().__init__()
        self.a = ConvBN(cin, k1, 1)
        self.b = ConvBN(cin, k3, 3)
        self.cout = k1 + k3

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], 1)


class Downsample(nn.Module):
    def __init__(self, cin, k):
        super().__init__()
        self.conv = ConvBN(cin, k, 3, 2, "valid")
        self.cout = cin + k

    def forward(self, x):
        return torch.cat([self.conv(x), F.max_pool2d(x, 3, 2)], 1)


class MiniGoogLeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        layers, c = [ConvBN(3, 96, 3)], 96
        for spec in [("i", 32, 32), ("i", 32, 48), ("d", 80), ("i", 112, 48), ("i", 96, 64),
                     ("i", 80, 80), ("i", 48, 96), ("d", 96), ("i", 176, 160), ("i", 176, 160)]:
            m = Inception(c, spec[1], spec[2]) if spec[0] == "i" else Downsample(c, spec[1])
            layers.append(m)
            c = m.cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.features(x)
        x = F.avg_pool2d(x, 7)
        x = F.dropout(x, 0.5, self.training)
        return self.fc(torch.flatten(x, 1))


def main():
    a = peer_common.parser(__doc__, batch=64, steps=20).parse_args()
    dev = peer_common.setup(a)
    model = MiniGoogLeNet().to(dev)
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=mf)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=5e-3, momentum=0.9)
    x = torch.randn(a.batch, 3, 32, 32, device=dev).to(memory_format=mf)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    warm, dt = peer_common.train(a, model, opt, x, y, dev)
    peer_common.report(a, dev, params, warm, dt)


if __name__ == "__main__":
    main()
