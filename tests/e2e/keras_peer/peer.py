"""What the Keras peer checks share: safetensors files, running trainer on a config, comparing checkpoints.

The peer side of every check is PyTorch (float64) written by hand to Keras 3's definitions; trainer
is run as a user runs it (a config, init.from weights, .npy data) and its last checkpoint is read
back. Every tensor the reference holds must be within TOL relative of trainer's.
"""
import json
import os
import shlex
import struct
import subprocess

import numpy as np

TOL = 1e-4
# TRAINER_PEER_THREADS=n: trainer runs with --threads n (the C++ test runs every script at 1 and 2),
# unless a case sets its own; TRAINER_PEER_ARGS: more arguments (the GPU: --gpus 0 ...), unless a
# case chooses its devices itself.
THREADS = os.environ.get("TRAINER_PEER_THREADS", "")
EXTRA = shlex.split(os.environ.get("TRAINER_PEER_ARGS", ""))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(a)), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b : 8 + n + e], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


def run_trainer(trainer, work, tag, cfg, args=()):
    """Writes cfg to WORK/TAG.yaml, runs `trainer run` on it in WORK; returns the run directory."""
    path = os.path.join(work, f"{tag}.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    run_dir = os.path.join(work, "runs", tag)
    if THREADS and "--threads" not in args:
        args = [*args, "--threads", THREADS]
    if EXTRA and "--cpu" not in args and "--gpus" not in args:
        args = [*args, *EXTRA]
    r = subprocess.run([trainer, "run", path, "--run-dir", run_dir, *args], cwd=work, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"trainer failed ({r.returncode}) on {tag}:\n{r.stdout}\n{r.stderr}")
    return run_dir


def checkpoint(run_dir, epoch):
    return read_safetensors(os.path.join(run_dir, "checkpoints", f"epoch-{epoch:04d}.safetensors"))


def metrics(run_dir):
    """metrics.csv as a list of {column: float} rows, one per epoch."""
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        lines = [l.strip().split(",") for l in f if l.strip()]
    return [{k: float(v) for k, v in zip(lines[0], row) if v != ""} for row in lines[1:]]


def max_rel(got, want):
    """Max over the reference's tensors of |got - want| / max(|want|, 1e-2·max|want| of the tensor).

    The floor: float32 arithmetic leaves an absolute error of the order of the tensor's scale times
    2^-24 on every element, so an element that ends near 0 (a weight whose update crossed it) is
    compared against 1% of the tensor's largest magnitude rather than its own, as a relative
    error it cannot have. The negative controls stay orders of magnitude above the tolerance."""
    worst, where = 0.0, ""
    for name, w in want.items():
        w = np.asarray(w, dtype=np.float64)
        if name not in got:
            return float("inf"), f"{name} missing"
        g = np.asarray(got[name], dtype=np.float64).reshape(w.shape)
        floor = max(1e-2 * float(np.max(np.abs(w))), 1e-12)
        e = float(np.max(np.abs(g - w) / np.maximum(np.abs(w), floor)))
        if not np.isfinite(e):
            e = float("inf")
        if e > worst:
            worst, where = e, name
    return worst, where


def rel(a, b):
    """Relative difference of two scalars."""
    return abs(a - b) / max(abs(b), 1e-12)


def save_npy(work, name, a):
    np.save(os.path.join(work, name), a)
