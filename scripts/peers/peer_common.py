"""What the PyTorch peers share: the command line, the settings a careful user turns on
(channels-last, cudnn.benchmark, torch.compile and its mode), the timed training loop and the JSON
line bench-vs-pytorch.sh reads.

--cudnn-benchmark: torch.backends.cudnn.benchmark = True, the first thing PyTorch's performance
guide tells a CNN user (cuDNN measures its algorithms per shape on the first steps).
--compile-mode default|reduce-overhead|max-autotune: torch.compile with that mode (--compile is
mode default); reduce-overhead and max-autotune replay the step as CUDA graphs. The warm-up steps,
which compile, are timed apart (warmup_seconds): compile time is never in images_per_s.
"""
import argparse, json, sys, time

import torch
import torch.nn.functional as F


def parser(doc, batch, steps):
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--amp", default="", choices=["", "bf16", "fp16"])
    ap.add_argument("--cudnn-benchmark", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile, mode default")
    ap.add_argument("--compile-mode", default="", choices=["", "default", "reduce-overhead", "max-autotune"])
    return ap


def setup(a):
    """Threads, seed and cuDNN's autotuner as asked; returns the device."""
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    return torch.device(a.device)


def variant(a):
    """The peer's settings in a few words: 'eager', 'eager + cudnn.benchmark', 'compile reduce-overhead', ..."""
    mode = a.compile_mode or ("default" if a.compile else "")
    name = f"compile {mode}" if mode else "eager"
    return name + (" + cudnn.benchmark" if a.cudnn_benchmark else "")


def train(a, model, opt, x, y, dev):
    """Warm-up then timed steps of cross-entropy training; returns (warm-up seconds, timed seconds)."""
    mode = a.compile_mode or ("default" if a.compile else "")
    if mode and not hasattr(torch, "compile"):
        sys.exit(f"peer: PyTorch {torch.__version__} has no torch.compile (PyTorch 2.0 brought it): "
                 f"--compile-mode {mode} needs PyTorch 2.x, as on the GPU machines")
    step_model = torch.compile(model, mode=mode) if mode else model
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    # fp16 autocast needs loss scaling, as GradScaler does it (bf16 does not).
    scaler = torch.cuda.amp.GradScaler() if a.amp == "fp16" and dev.type == "cuda" else None

    def step():
        opt.zero_grad(set_to_none=True)
        if amp_dtype:
            with torch.autocast(dev.type, dtype=amp_dtype):
                loss = F.cross_entropy(step_model(x), y)
        else:
            loss = F.cross_entropy(step_model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    t1 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    return t1 - t0, time.perf_counter() - t1


def report(a, dev, params, warm, dt, **extra):
    """The JSON line: throughput over the timed steps, the warm-up (compile) time apart."""
    line = {"peer": "pytorch " + torch.__version__, **extra, "variant": variant(a), "device": a.device,
            "threads": torch.get_num_threads(), "batch": a.batch, "params": params, "steps": a.steps,
            "seconds": round(dt, 4), "warmup_seconds": round(warm, 3),
            "images_per_s": round(a.batch * a.steps / dt, 2), "ms_per_step": round(1000 * dt / a.steps, 2),
            "peak_device_mb": round(torch.cuda.max_memory_reserved() / 2**20, 1) if dev.type == "cuda" else 0}
    print(json.dumps(line))
