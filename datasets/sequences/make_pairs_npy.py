#!/usr/bin/env python3
"""Writes a toy "same source?" pair task as a.npy, b.npy, labels.npy (python3 + numpy only).

    python3 datasets/sequences/make_pairs_npy.py --out datasets/sequences/toy --size 1024

a.npy and b.npy are float32 [size, length, features]; labels.npy is int64 [size], 1 when a[i] and
b[i] come from the same source (a per-feature sinusoid pattern), else 0 (exactly half each).
Use it as `{type: npy, inputs: [a.npy, b.npy], labels: labels.npy}` (see README.md).
"""
import argparse
import os

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="datasets/sequences/toy", help="output directory")
    p.add_argument("--size", type=int, default=1024, help="pairs")
    p.add_argument("--length", type=int, default=20, help="time steps T")
    p.add_argument("--features", type=int, default=8, help="values per step F")
    p.add_argument("--sources", type=int, default=8, help="distinct patterns (>= 2)")
    p.add_argument("--noise", type=float, default=0.5, help="std-dev of the Gaussian noise")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.sources < 2 or a.size < 1 or a.length < 1 or a.features < 1:
        p.error("size, length and features must be >= 1 and sources >= 2")

    rng = np.random.default_rng(a.seed)
    shape = (a.sources, 1, a.features)
    amp = rng.uniform(0.7, 1.3, shape) * rng.choice([-1.0, 1.0], shape)
    freq = rng.uniform(0.15, 1.5, shape)  # radians per step
    phase = rng.uniform(0.0, 2 * np.pi, shape)

    labels = np.zeros(a.size, dtype=np.int64)
    labels[rng.permutation(a.size)[: a.size // 2]] = 1
    src_a = rng.integers(0, a.sources, a.size)
    src_b = np.where(labels == 1, src_a, (src_a + rng.integers(1, a.sources, a.size)) % a.sources)

    def sequences(src):
        t = np.arange(a.length)[None, :, None] + rng.uniform(-0.5, 0.5, (a.size, 1, 1))
        x = amp[src] * np.sin(freq[src] * t + phase[src])
        return (x + a.noise * rng.standard_normal(x.shape)).astype("<f4")

    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "a.npy"), sequences(src_a))
    np.save(os.path.join(a.out, "b.npy"), sequences(src_b))
    np.save(os.path.join(a.out, "labels.npy"), labels.astype("<i8"))
    print(f"{a.out}: a.npy, b.npy ({a.size}, {a.length}, {a.features}) float32, labels.npy ({a.size},) "
          f"int64, {int(labels.sum())} same-source pairs")


if __name__ == "__main__":
    main()
