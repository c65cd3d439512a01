#!/usr/bin/env python3
"""Peer check of trainer's optimizers against Keras 3's definitions, written by hand in PyTorch.

Usage: optimizers.py TRAINER WORKDIR. A dense [4] -> 3 + softmax model (weights given to trainer by
init.from), 16 samples in one batch, 3 steps (3 epochs of one step each, shuffle off) at a rate
halved every step (schedule step, every 1, gamma 0.5). For each optimizer variant, trainer runs with
convention keras and the reference computes the same steps with Keras's formulas; every weight and
optimizer slot of trainer's last checkpoint must be within 1e-4 relative. Negative control: trainer
with convention pytorch must NOT be within the tolerance of the Keras reference (with rates that
change every step and epsilon 1e-3 the forms differ well above it). Then gradient clipping
(train.clip_norm as Keras's global_clipnorm, train.clip_value as clipvalue), each against two
controls that must differ: trainer without clipping, and the reference clipping each variable by
its own norm (Keras's clipnorm, not global). Prints tables; exit 0 when every check holds, 1 when
one fails, 77 when torch cannot be imported.
"""
import os
import sys

import numpy as np

from peer import TOL, checkpoint, max_rel, run_trainer as run_config, write_safetensors

import keras_ref  # noqa: F401 - exits 77 (a skip) when torch cannot be imported; float64 by default
import torch
N, D, K = 16, 4, 3
LR0, GAMMA, STEPS = 0.1, 0.5, 3


def rate(step):  # step 0, 1, 2: the schedule `step` (every 1 epoch, gamma 0.5), one step per epoch
    return LR0 * GAMMA**step


def grads(w, b, x, y):
    """The mean softmax cross-entropy's gradients (float64 autograd)."""
    w = w.clone().requires_grad_(True)
    b = b.clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(x @ w + b, y)
    loss.backward()
    return w.grad.detach(), b.grad.detach()


# --- Keras 3's update rules, one variable at a time (state dict per variable).
def keras_decay(p, lr, wd):
    # keras/src/optimizers/base_optimizer.py, _apply_weight_decay: variable - variable * wd * lr,
    # before update_step, on every optimizer (PyTorch: L2 added to the gradient for SGD/Adam/RMSprop).
    return p - p * wd * lr if wd else p


def keras_sgd(p, g, s, lr, t, o):
    # keras/src/optimizers/sgd.py: m = m*momentum - g*lr; p += m (nesterov: p += m*momentum - g*lr).
    # PyTorch keeps buf = momentum*buf + g and p -= lr*buf: the rate multiplies at use, not when made.
    p = keras_decay(p, lr, o.get("weight_decay", 0))
    mom = o.get("momentum", 0)
    if mom == 0:
        return p - lr * g
    m = s.setdefault("momentum", torch.zeros_like(p))
    m = m * mom - g * lr
    s["momentum"] = m
    return p + (m * mom - g * lr if o.get("nesterov") else m)


def keras_adam(p, g, s, lr, t, o, adamw=False):
    # keras/src/optimizers/adam.py: alpha = lr*sqrt(1-b2^t)/(1-b1^t); p -= m*alpha/(sqrt(v)+eps)
    # (epsilon hat). PyTorch: p -= lr*(m/(1-b1^t))/(sqrt(v/(1-b2^t))+eps).
    # keras/src/optimizers/adamw.py: weight_decay default 0.004 (PyTorch's AdamW 0.01).
    b1, b2, eps = o.get("beta1", 0.9), o.get("beta2", 0.999), o.get("epsilon", 1e-7)
    p = keras_decay(p, lr, o.get("weight_decay", 0.004 if adamw else 0))
    m = s.setdefault("m", torch.zeros_like(p))
    v = s.setdefault("v", torch.zeros_like(p))
    m = m + (g - m) * (1 - b1)
    v = v + (g * g - v) * (1 - b2)
    s["m"], s["v"] = m, v
    alpha = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
    return p - m * alpha / (torch.sqrt(v) + eps)


def keras_rmsprop(p, g, s, lr, t, o):
    # keras/src/optimizers/rmsprop.py: denominator = velocity (- average_grad^2 when centered) + eps,
    # increment = lr*g/sqrt(denominator): epsilon inside the root (PyTorch: sqrt(.) + eps outside),
    # momentum = momentum*mom + increment, p -= momentum (PyTorch: buf = m*buf + g/d, p -= lr*buf).
    rho, eps, mom = o.get("rho", 0.9), o.get("epsilon", 1e-7), o.get("momentum", 0)
    p = keras_decay(p, lr, o.get("weight_decay", 0))
    ms = rho * s.get("mean_square", torch.zeros_like(p)) + (1 - rho) * g * g
    s["mean_square"] = ms
    den = ms
    if o.get("centered"):
        mg = rho * s.get("mean_grad", torch.zeros_like(p)) + (1 - rho) * g
        s["mean_grad"] = mg
        den = ms - mg * mg
    inc = lr * g / torch.sqrt(den + eps)
    if mom > 0:
        s["momentum"] = mom * s.get("momentum", torch.zeros_like(p)) + inc
        return p - s["momentum"]
    return p - inc


UPDATE = {"sgd": keras_sgd, "adam": keras_adam, "adamw": lambda *a: keras_adam(*a, adamw=True), "rmsprop": keras_rmsprop}

VARIANTS = [
    ("sgd", "momentum", {"momentum": 0.9}),
    ("sgd", "nesterov", {"momentum": 0.9, "nesterov": True}),
    ("sgd", "momentum + weight_decay", {"momentum": 0.9, "weight_decay": 0.05}),
    ("adam", "epsilon 1e-3", {"epsilon": 1e-3}),
    ("adam", "weight_decay 0.1, eps 1e-3", {"weight_decay": 0.1, "epsilon": 1e-3}),
    ("adamw", "default decay, eps 1e-3", {"epsilon": 1e-3}),
    ("adamw", "defaults", {}),
    ("rmsprop", "eps 1e-3", {"epsilon": 1e-3}),
    ("rmsprop", "centered, eps 1e-3", {"centered": True, "epsilon": 1e-3}),
    ("rmsprop", "momentum 0.5", {"momentum": 0.5}),
    ("rmsprop", "centered + momentum + wd", {"centered": True, "momentum": 0.5, "epsilon": 1e-3, "weight_decay": 0.05}),
]


def clipped(gs, clip):
    """Keras 3's gradient clipping (keras/src/optimizers/base_optimizer.py, _clip_gradients):
    global_clipnorm: clip_by_global_norm, g * c / max(global norm, c); clipvalue: clip to [-v, v];
    clipnorm: each variable by its own norm (here only as a control)."""
    if "clip_norm" in clip:
        c = clip["clip_norm"]
        norm = torch.sqrt(sum((g * g).sum() for g in gs))
        return [g * c / torch.clamp(norm, min=c) for g in gs]
    if "clip_value" in clip:
        return [torch.clamp(g, -clip["clip_value"], clip["clip_value"]) for g in gs]
    if "per_variable_norm" in clip:
        c = clip["per_variable_norm"]
        return [g * c / torch.clamp(torch.sqrt((g * g).sum()), min=c) for g in gs]
    return gs


CLIP_VARIANTS = [
    ("sgd", "clip_norm 0.05 (global_clipnorm)", {"momentum": 0.9}, {"clip_norm": 0.05}),
    ("adam", "clip_norm 0.05 (global_clipnorm)", {"epsilon": 1e-3}, {"clip_norm": 0.05}),
    ("sgd", "clip_value 0.02 (clipvalue)", {"momentum": 0.9}, {"clip_value": 0.02}),
    ("rmsprop", "clip_value 0.02 (clipvalue)", {"epsilon": 1e-3}, {"clip_value": 0.02}),
]


def reference(kind, opts, w0, b0, x, y, clip=None):
    params = {"dense/kernel": torch.tensor(w0), "dense/bias": torch.tensor(b0)}
    state = {k: {} for k in params}
    for step in range(STEPS):
        lr, t = rate(step), step + 1
        gw, gb = clipped(grads(params["dense/kernel"], params["dense/bias"], x, y), clip or {})
        for name, g in (("dense/kernel", gw), ("dense/bias", gb)):
            params[name] = UPDATE[kind](params[name], g, state[name], lr, t, opts)
    out = {k: v.numpy() for k, v in params.items()}
    for name, s in state.items():
        for slot, v in s.items():
            out[f"optimizer/{slot}/{name}"] = v.numpy()
    return out


def yaml_value(v):
    return "true" if v is True else "false" if v is False else repr(v)


def run_trainer(trainer, work, tag, kind, opts, convention, train_extra=""):
    opt = ", ".join([f"type: {kind}", f"lr: {LR0}", f"convention: {convention}"] + [f"{k}: {yaml_value(v)}" for k, v in opts.items()])
    cfg = f"""name: peer
seed: 1
model:
  input: [{D}]
  layers:
    - {{name: dense, type: dense, units: {K}}}
    - {{name: out, type: softmax}}
init: {{from: w.safetensors}}
data:
  train: {{type: npy, x: x.npy, labels: y.npy}}
train: {{epochs: {STEPS}, batch_size: {N}, shuffle: false{train_extra}}}
optimizer: {{{opt}}}
schedule: {{type: step, every: 1, gamma: {GAMMA}}}
"""
    return checkpoint(run_config(trainer, work, tag, cfg), STEPS)


def main():
    trainer, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = rng.integers(0, K, N).astype(np.int32)
    w0 = (rng.standard_normal((D, K)) * 0.5).astype(np.float32)
    b0 = (rng.standard_normal(K) * 0.1).astype(np.float32)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)
    write_safetensors(os.path.join(work, "w.safetensors"), {"dense/kernel": w0, "dense/bias": b0})
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)

    ok = True
    print(f"{'component':<9} {'variant':<30} {'keras: max rel err':>19} {'pytorch (control)':>18}  result")
    for i, (kind, name, opts) in enumerate(VARIANTS):
        want = reference(kind, opts, w0.astype(np.float64), b0.astype(np.float64), xt, yt)
        ek, where = max_rel(run_trainer(trainer, work, f"v{i}-keras", kind, opts, "keras"), want)
        ep, _ = max_rel(run_trainer(trainer, work, f"v{i}-pytorch", kind, opts, "pytorch"), want)
        good = ek <= TOL and ep > TOL
        ok &= good
        note = "ok" if good else f"FAIL (worst {where})" if ek > TOL else "FAIL (control within tolerance)"
        print(f"{kind:<9} {name:<30} {ek:>19.3e} {ep:>18.3e}  {note}")
    print(f"tolerance {TOL:g} relative; {'all within' if ok else 'FAILED'}")

    # Clipping: limits well under the gradients' size, so that every step clips.
    print(f"{'component':<9} {'variant':<30} {'keras: max rel err':>19} {'unclipped':>10} {'per-variable':>13}  result")
    for i, (kind, name, opts, clip) in enumerate(CLIP_VARIANTS):
        (key, limit), = clip.items()
        want = reference(kind, opts, w0.astype(np.float64), b0.astype(np.float64), xt, yt, clip)
        other = reference(kind, opts, w0.astype(np.float64), b0.astype(np.float64), xt, yt, {"per_variable_norm": limit})
        got = run_trainer(trainer, work, f"c{i}", kind, opts, "keras", f", {key}: {limit}")
        ek, where = max_rel(got, want)
        eu, _ = max_rel(run_trainer(trainer, work, f"c{i}-free", kind, opts, "keras"), want)
        ev, _ = max_rel(got, other)
        good = ek <= TOL and eu > TOL and ev > TOL
        ok &= good
        note = "ok" if good else f"FAIL (worst {where})" if ek > TOL else "FAIL (a control within tolerance)"
        print(f"{kind:<9} {name:<30} {ek:>19.3e} {eu:>10.3e} {ev:>13.3e}  {note}")
    print(f"tolerance {TOL:g} relative; {'all within' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
