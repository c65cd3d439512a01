#!/usr/bin/env python3
"""Peer baseline: MobileNetV2 (torchvision, width 1.0, 2 classes) trained with PyTorch on random
224x224 images: the referee for configs/mobilenetv2_cats_vs_dogs.yaml (same layers as Keras'
MobileNetV2: BN eps 1e-3, momentum 0.999 in Keras terms). Prints one JSON line like the
MiniGoogLeNet peer in ../shared/anchors (same options).
Usage: mobilenetv2_torch.py [--batch 16] [--steps 10] [--warmup 3] [--device cpu|cuda]
       [--threads N] [--channels-last] [--amp bf16|fp16] [--compile] [--size 224]
"""
import argparse, json, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--amp", default="")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
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
    step_model = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).to(memory_format=mf)
    y = torch.randint(0, 2, (a.batch,), device=dev)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)

    def step():
        opt.zero_grad(set_to_none=True)
        if amp_dtype:
            with torch.autocast(dev.type, dtype=amp_dtype):
                loss = F.cross_entropy(step_model(x), y)
        else:
            loss = F.cross_entropy(step_model(x), y)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    try:
        for _ in range(a.warmup):
            step()
    except RuntimeError as e:  # an op without a kernel for this type on this device
        sys.exit(f"mobilenetv2_torch: PyTorch {torch.__version__} cannot train this model with --amp {a.amp} "
                 f"on {a.device}: {str(e).splitlines()[0]}")
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch " + torch.__version__ + " torchvision " + torchvision.__version__,
                      "model": "mobilenet_v2", "device": a.device, "threads": torch.get_num_threads(),
                      "batch": a.batch, "params": params, "steps": a.steps, "seconds": round(dt, 4),
                      "images_per_s": round(a.batch * a.steps / dt, 2),
                      "ms_per_step": round(1000 * dt / a.steps, 2),
                      "peak_device_mb": round(torch.cuda.max_memory_reserved() / 2**20, 1)
                      if a.device.startswith("cuda") else 0}))


if __name__ == "__main__":
    main()
