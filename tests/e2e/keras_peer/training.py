#!/usr/bin/env python3
"""Peer check of what a training run does around the layers: schedules, the console's loss and
accuracy, lr_scaling, and synchronised batch norm across two replicas, against Keras 3's
definitions written by hand in PyTorch.

Usage: training.py TRAINER WORKDIR. Checked, each within 1e-4 relative:
  - schedules: a dense classifier, 18 samples in batches of 4 (the last of 2), 3 epochs of SGD
    with momentum 0.9 (Keras's velocity); the rate of every step from the Keras schedule that the
    trainer's names (keras/src/optimizers/schedules/learning_rate_schedule.py: ExponentialDecay,
    staircase for `step`, PolynomialDecay with end_learning_rate 0, CosineDecay's alpha for
    min_factor, with decay_steps in epochs: one value per epoch, or per step with per_step, as
    keras.callbacks.LearningRateScheduler gives per epoch), warmup linear from warmup_start.
    Weights and the momentum slot after the run; each epoch's `loss` (Keras's logs["loss"]: the
    batch losses averaged with the batch sizes as weights, so the short last batch counts for 2)
    and `accuracy`. Controls: the rate of the epoch before; the last batch weighted as a full one.
  - lr_scaling: linear on `--cpu 2` equals one replica with the global batch at twice the rate.
  - sync_bn on `--cpu 2` equals batch norm over the global batch (Keras's
    BatchNormalization(synchronized=True)); control: each replica's own statistics.
Prints a table; exit 0 when every check holds, 1 when one fails, 77 when torch cannot be imported.
"""
import math
import os
import sys

import numpy as np

from peer import TOL, checkpoint, max_rel, metrics, rel, run_trainer, save_npy, write_safetensors

import keras_ref as K  # exits 77 (a skip) when torch cannot be imported
import torch
CLASSES, LR, MOM = 3, 0.2, 0.9
rng = np.random.default_rng(23)


def factor(kind, opts, t, epochs):
    if kind == "constant":
        return 1.0
    if kind == "step":  # ExponentialDecay(decay_rate=gamma, decay_steps=every, staircase=True)
        return opts["gamma"] ** math.floor(t / opts["every"])
    if kind == "exponential":  # ExponentialDecay(decay_rate=gamma, decay_steps=1 epoch)
        return opts["gamma"] ** t
    if kind == "poly":  # PolynomialDecay(decay_steps=epochs, end_learning_rate=0, power)
        return (1 - min(t, epochs) / epochs) ** opts["power"]
    if kind == "cosine":  # CosineDecay(decay_steps=epochs, alpha=min_factor)
        a = opts.get("min_factor", 0.0)
        return a + (1 - a) * 0.5 * (1 + math.cos(math.pi * min(t, epochs) / epochs))
    raise ValueError(kind)


def rate(kind, opts, epoch, step, steps, epochs, lag=False):
    t = epoch + step / steps if opts.get("per_step") else epoch
    if lag:  # control: the rate of the epoch before
        t = max(t - 1, 0)
    f = factor(kind, opts, t, epochs)
    w = opts.get("warmup_epochs", 0)
    if w:
        tw = epoch + step / steps
        if tw < w:
            s = opts.get("warmup_start", 0.0)
            f *= s + (1 - s) * tw / w
    return LR * f


def schedule_case(trainer, work, tag, kind, opts):
    n, batch, epochs = 18, 4, 3
    steps = -(-n // batch)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    w0 = {"d/kernel": (rng.standard_normal((5, CLASSES)) * 0.5).astype(np.float32),
          "d/bias": (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)}
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    save_npy(d, "x.npy", x)
    save_npy(d, "y.npy", y)
    write_safetensors(os.path.join(d, "w.safetensors"), w0)
    sched = ", ".join([f"type: {kind}"] + [f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in opts.items()])
    cfg = f"""name: peer
seed: 1
model:
  input: [5]
  layers:
    - {{name: d, type: dense, units: {CLASSES}}}
    - {{name: out, type: softmax}}
init: {{from: w.safetensors}}
data:
  train: {{type: npy, x: x.npy, labels: y.npy, classes: {CLASSES}}}
train: {{epochs: {epochs}, batch_size: {batch}, shuffle: false}}
optimizer: {{type: sgd, lr: {LR}, momentum: {MOM}}}
schedule: {{{sched}}}
"""
    run = run_trainer(trainer, d, "run", cfg)
    got, rows = checkpoint(run, epochs), metrics(run)

    def reference(lag=False, equal_batches=False):
        P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w0.items()}
        vel = {k: torch.zeros_like(v) for k, v in P.items()}
        xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)
        logs = []
        for e in range(epochs):
            total, weight, correct = 0.0, 0, 0
            for s in range(steps):
                xb, yb = xt[s * batch : (s + 1) * batch], yt[s * batch : (s + 1) * batch]
                z = K.dense(xb, P["d/kernel"], P["d/bias"], f32=True)
                loss = K.sparse_categorical_crossentropy(z, yb, CLASSES)
                nb = batch if equal_batches else len(yb)  # Keras: Mean(loss, sample_weight=batch size)
                total, weight = total + float(loss) * nb, weight + nb
                correct += int((z.argmax(1) == yb).sum())
                grads = torch.autograd.grad(loss, list(P.values()))
                lr = rate(kind, opts, e, s, steps, epochs, lag)
                with torch.no_grad():
                    for (k, p), g in zip(P.items(), grads):  # keras/src/optimizers/sgd.py
                        vel[k] = MOM * vel[k] - lr * g
                        p += vel[k]
            logs.append((total / weight, correct / n))
        want = {k: v.detach().numpy() for k, v in P.items()}
        want.update({f"optimizer/momentum/{k}": v.numpy() for k, v in vel.items()})
        return want, logs

    def error(want, logs):
        err, where = max_rel(got, want)
        for e, (loss, acc) in enumerate(logs):
            if rel(rows[e]["loss"], loss) > err:
                err, where = rel(rows[e]["loss"], loss), f"loss of epoch {e + 1}"
            if abs(rows[e]["accuracy"] - acc) > 1e-9:
                err, where = float("inf"), f"accuracy of epoch {e + 1}: {rows[e]['accuracy']} vs {acc}"
        return err, where

    err, where = error(*reference())
    controls = []
    if kind != "constant":
        controls.append(("the rate of the epoch before", error(*reference(lag=True))[0]))
    else:
        controls.append(("the short last batch weighted as a full one", error(*reference(equal_batches=True))[0]))
    return err, where, controls


def replicas_case(trainer, work, tag, what):
    """--cpu 2: lr_scaling linear (a dense model), or sync_bn (conv -> batch norm -> relu -> dense)."""
    per, epochs = 4, 2
    n = 2 * per
    bn = what == "sync_bn"
    shape = [5, 5, 2] if bn else [5]
    x = rng.standard_normal([n] + shape).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    if bn:
        w0 = {"conv/kernel": (rng.standard_normal((3, 3, 2, 3)) * 0.5).astype(np.float32),
              "bn/gamma": (1 + rng.standard_normal(3) * 0.2).astype(np.float32),
              "bn/beta": (rng.standard_normal(3) * 0.2).astype(np.float32),
              "bn/moving_mean": np.zeros(3, np.float32), "bn/moving_variance": np.ones(3, np.float32),
              "d/kernel": (rng.standard_normal((75, CLASSES)) * 0.3).astype(np.float32),
              "d/bias": np.zeros(CLASSES, np.float32)}
        layers = ("    - {name: conv, type: conv2d, filters: 3, kernel: 3, padding: same, use_bias: false}\n"
                  "    - {name: bn, type: batchnorm, momentum: 0.8}\n    - {name: relu, type: relu}\n"
                  "    - {name: flat, type: flatten}\n")
        extra, opt = ", sync_bn: true", ""
    else:
        w0 = {"d/kernel": (rng.standard_normal((5, CLASSES)) * 0.5).astype(np.float32),
              "d/bias": (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)}
        layers, extra, opt = "", "", ", lr_scaling: linear"
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    save_npy(d, "x.npy", x)
    save_npy(d, "y.npy", y)
    write_safetensors(os.path.join(d, "w.safetensors"), w0)
    cfg = f"""name: peer
seed: 1
model:
  input: {shape}
  layers:
{layers}    - {{name: d, type: dense, units: {CLASSES}}}
    - {{name: out, type: softmax}}
init: {{from: w.safetensors}}
data:
  train: {{type: npy, x: x.npy, labels: y.npy, classes: {CLASSES}}}
train: {{epochs: {epochs}, batch_size: {per}, shuffle: false{extra}}}
optimizer: {{type: sgd, lr: {LR}{opt}}}
"""
    got = checkpoint(run_trainer(trainer, d, "run", cfg, ["--cpu", "2", "--threads", "1"]), epochs)

    def reference(per_replica_stats=False):
        P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w0.items() if "moving" not in k}
        S = {"bn": {k: torch.tensor(w0[f"bn/{k}"], dtype=torch.float64) for k in ("moving_mean", "moving_variance")}} if bn else {}
        xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)
        lr = LR if bn else 2 * LR  # lr_scaling linear: the rate times the replica count (Goyal et al.)
        for _ in range(epochs):
            if bn:
                h = K.conv2d(xt, P["conv/kernel"], padding="same")
                if per_replica_stats:  # control: each replica normalises its own half
                    s0 = {k: v.clone() for k, v in S["bn"].items()}
                    h = torch.cat([K.batchnorm_train(h[:per], P["bn/gamma"], P["bn/beta"], S["bn"], 0.8, 1e-3),
                                   K.batchnorm_train(h[per:], P["bn/gamma"], P["bn/beta"], s0, 0.8, 1e-3)])
                else:
                    h = K.batchnorm_train(h, P["bn/gamma"], P["bn/beta"], S["bn"], 0.8, 1e-3)
                h = K.flatten(torch.relu(h))
            else:
                h = xt
            loss = K.sparse_categorical_crossentropy(K.dense(h, P["d/kernel"], P["d/bias"], f32=True), yt, CLASSES)
            grads = torch.autograd.grad(loss, list(P.values()))
            with torch.no_grad():
                for p, g in zip(P.values(), grads):
                    p -= lr * g
        want = {k: v.detach().numpy() for k, v in P.items()}
        for k, v in S.get("bn", {}).items():
            want[f"bn/{k}"] = v.numpy()
        return want

    err, where = max_rel(got, reference())
    controls = [("each replica's own statistics", max_rel(got, reference(per_replica_stats=True))[0])] if bn else []
    if not bn:
        controls.append(("the rate not scaled", max_rel(got, {k: v for k, v in reference_unscaled(w0, x, y, epochs).items()})[0]))
    return err, where, controls


def reference_unscaled(w0, x, y, epochs):
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w0.items()}
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)
    for _ in range(epochs):
        loss = K.sparse_categorical_crossentropy(K.dense(xt, P["d/kernel"], P["d/bias"], f32=True), yt, CLASSES)
        grads = torch.autograd.grad(loss, list(P.values()))
        with torch.no_grad():
            for p, g in zip(P.values(), grads):
                p -= LR * g
    return {k: v.detach().numpy() for k, v in P.items()}


SCHEDULES = [
    ("constant", {}),
    ("step", {"every": 1, "gamma": 0.5}),
    ("exponential", {"gamma": 0.7}),
    ("exponential", {"gamma": 0.7, "per_step": True}),
    ("poly", {"power": 2.0}),
    ("poly", {"power": 1.0, "per_step": True}),
    ("cosine", {"min_factor": 0.1}),
    ("cosine", {"per_step": True}),
    ("step", {"every": 2, "gamma": 0.1, "warmup_epochs": 1.5, "warmup_start": 0.1}),
]


def main():
    trainer, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    ok = True
    print(f"{'component':<12} {'variant':<52} {'max rel err':>12}  result")
    rows = [("schedule", f"{k} " + ", ".join(f"{a}={b}" for a, b in o.items()), lambda i=i, k=k, o=o:
             schedule_case(trainer, work, f"s{i}", k, o)) for i, (k, o) in enumerate(SCHEDULES)]
    rows.append(("lr_scaling", "linear, --cpu 2 = 1 replica x global batch, 2x rate",
                 lambda: replicas_case(trainer, work, "lrs", "lr_scaling")))
    rows.append(("sync_bn", "--cpu 2 = batch norm over the global batch",
                 lambda: replicas_case(trainer, work, "sbn", "sync_bn")))
    for comp, variant, fn in rows:
        err, where, controls = fn()
        good = err <= TOL
        ok &= good
        print(f"{comp:<12} {variant:<52} {err:>12.3e}  {'ok' if good else f'FAIL (worst {where})'}")
        for ctl, e in controls:
            ok &= e > TOL
            print(f"{'':<12} {'  control: ' + ctl:<52} {e:>12.3e}  {'ok (differs)' if e > TOL else 'FAIL (control within tolerance)'}")
    print(f"tolerance {TOL:g} relative (weights, optimizer slots, moving statistics, epoch loss; accuracy exact); "
          f"{'all within' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
