#!/usr/bin/env python3
"""Peer check of every layer type and loss against Keras 3's definitions, written by hand in PyTorch.

Usage: layers.py TRAINER WORKDIR [fp32|bf16] (default: both, fp32 first). Each case is a small model given to trainer with its initial
weights (init.from) and trained for 2 steps of plain SGD (lr 0.1, one batch of 4 samples per
epoch, shuffle off) on .npy data, with a validation set of 4 other samples. The reference
(keras_ref.py, float64) runs the same steps with Keras's definitions. Checked per case, each
within 1e-4 relative:
  - every parameter and moving statistic of trainer's last checkpoint;
  - the training loss trainer reports for each epoch (metrics.csv `loss`: the loss of the epoch's
    one batch before its update, Keras's logs["loss"]);
  - the validation loss (metrics.csv `val_loss`: inference mode, batch norm's moving statistics).
Negative controls: the same reference with one convention flipped (TensorFlow's 'same' padding,
the kernel layout, the flatten order, batch norm's momentum and biased variance, average pooling
without the padding) must NOT be within the tolerance.
Then every case again with `precision: bf16` (mixed precision: bf16 activations, f32 weights),
against the same float64 reference: what is bounded there is each tensor's update over the run,
|Δgot - Δwant| / |Δwant| (L2), each tensor against its own bound derived from bf16's rounding: the
reference run 8 more times with every value trainer stores in bf16 or converts to it (activations,
their gradients, the weights and inputs a convolution or dense layer multiplies) perturbed by a
random factor 1 + e, |e| <= 2^-8 (keras_ref.rounding), and the bound 8x the largest update error of
those runs, never below 2^-8 (one bf16 rounding of the update). So a tensor whose update bf16 barely
moves (2e-3 of it) is held to that, and one that nearly cancels (an update 60x smaller than its
terms) is allowed what its rounding gives it. The losses are left to the fp32 rows. The controls
must still fail against the same bounds (they are 9x to 330x them), but for those whose difference
is within bf16's rounding (Case.bf16_blind; the fp32 pass runs them): the choice of batch
variance after a convolution (168 rows: a difference of 1/167 in the moving variance, within bf16's
rounding of it, 0.4-0.5 of the bound; the batch norm on dense features, 4 rows: 1/3, checks that
control in bf16, 8.6x its bound), GELU's other form (5e-4 of the value) and layer norm's epsilon as
PyTorch's (1e-5 for 1e-3: 5e-4/variance). A tensor whose exact update is zero (attention's key
bias) is held to one bf16 rounding of the model's largest update (update_errs). Max pooling is left out of the bf16 pass, saying why: where two
values of a window are within bf16's rounding of each other the maximum (and the gradient's path)
is bf16's choice, not the float64 reference's (tests/unit/ops/bf16_window_ops_test.cpp checks the
bf16 kernel on distinct values). Where the CPU has no bf16 (no AVX-512) trainer refuses the
precision, and the bf16 rows say so.
Usage: layers.py TRAINER WORKDIR [fp32|bf16] (one pass; both by default). The bf16 pass alone draws
the fp32 pass's data first, so that its cases see the same data either way.
PEER_ONLY=prelu,subtract (environment) runs only those components' cases (while developing one).
Prints a table; exit 0 when every check holds, 1 when one fails, 77 when something needed is missing
(torch; for the bf16 pass alone, a CPU with bf16), with a line "SKIPPED (<kind>): <reason>".
"""
import os
import sys

import numpy as np

from peer import TOL, checkpoint, max_rel, metrics, rel, run_trainer, save_npy, write_safetensors

import keras_ref as K  # exits 77 (a skip) when torch cannot be imported
import torch
from layer_cases import CLASSES, LR, N, SEED, STEPS, cases, rng

BF16_RUNS, BF16_FACTOR = 8, 8.0


def make_inputs(case, n):
    X, g = {}, case.gen or rng
    for name, (kind, shape, *high) in case.inputs.items():
        if kind == "ids":  # token ids below 10, or below the third element when given
            X[name] = g.integers(0, high[0] if high else 10, [n] + shape).astype(np.int32)
        else:
            X[name] = g.standard_normal([n] + shape).astype(np.float32)
    return X


def loss_of(case, out, y, ctl=None):
    if case.loss == "binary_crossentropy":
        return K.binary_crossentropy(out, y, case.smoothing)
    if case.positions:  # scores [N, T, K], labels [N, T]: the mean over every position (Keras on a sequence output)
        flat = y.reshape(-1)
        loss = K.sparse_categorical_crossentropy(out.reshape(-1, CLASSES), flat, CLASSES, case.smoothing, case.ignore)
        if ctl == "pads counted in the mean":  # the scored positions' sum over every position
            return loss * float((flat != case.ignore).sum()) / flat.numel()
        return loss * case.positions if ctl == "positions summed, not averaged" else loss
    return K.sparse_categorical_crossentropy(out, y, CLASSES, case.smoothing)


def torch_inputs(X):
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in X.items()}


def reference(case, X, y, Xv, yv, ctl=None):
    """Trains as trainer does: STEPS steps of SGD on the one batch; returns the final tensors (by
    checkpoint name), the training loss of each step and the validation loss after each."""
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in case.params.items()}
    S = {layer: {k: torch.tensor(v, dtype=torch.float64) for k, v in st.items()} for layer, st in case.state.items()}
    xt, yt = torch_inputs(X), torch.tensor(y, dtype=torch.int64)
    xv, yvt = torch_inputs(Xv), torch.tensor(yv, dtype=torch.int64)
    losses, val = [], []
    for step in range(STEPS):
        loss = loss_of(case, case.forward(P, xt, S, True, ctl, step), yt, ctl)
        losses.append(float(loss))
        grads = torch.autograd.grad(loss, list(P.values()))
        with torch.no_grad():
            for p, g in zip(P.values(), grads):
                p -= LR * g
            val.append(float(loss_of(case, case.forward(P, xv, S, False, ctl, step), yvt)))
    want = {k: v.detach().numpy() for k, v in P.items()}
    for layer, st in S.items():
        for k, v in st.items():
            want[f"{layer}/{k}"] = v.numpy()
    return want, losses, val


def config(case, precision="fp32"):
    names = list(case.inputs)
    if names == ["x"] and not any("inputs: [x]" in l for l in case.layers):
        model_in = f"  input: {case.inputs['x'][1]}\n"
    else:
        model_in = "  inputs:\n" + "".join(f"    - {{name: {n}, shape: {case.inputs[n][1]}}}\n" for n in names)
    data = (lambda split: f"{{type: npy, x: x{split}.npy, labels: y{split}.npy, classes: {CLASSES}}}" if len(names) == 1
            else f"{{type: npy, inputs: [{', '.join(f'{n}{split}.npy' for n in names)}], labels: y{split}.npy, classes: {CLASSES}}}")
    layers = "".join(f"    - {l}\n" for l in case.layers)
    ls = f", label_smoothing: {case.smoothing}" if case.smoothing else ""
    if case.ignore is not None:
        ls += f", ignore_class: {case.ignore}"
    return f"""name: peer
seed: {SEED}
precision: {precision}
model:
{model_in}  layers:
{layers}init: {{from: w.safetensors}}
data:
  train: {data("")}
  val: {data("v")}
train: {{epochs: {STEPS}, batch_size: {N}, shuffle: false, loss: {case.loss}{ls}}}
optimizer: {{type: sgd, lr: {LR}}}
"""


def update_errs(got, want, init):
    """Per tensor, the relative L2 error of the update (final - initial). A tensor whose float64
    update is zero by an invariance (attention's key bias: softmax ignores a shift shared by a row's
    scores, so its gradient is a sum that cancels exactly) has no relative error to measure: every
    implementation leaves it its roundings of the cancelling terms. Its error is measured against
    the model's largest update instead (below 1e-9 of it counts as zero), so that one bf16 rounding
    of that update (the bound's 2^-8 floor) is what it may receive."""
    out, upd = {}, {}
    for k, w in want.items():
        w0 = np.asarray(init[k], dtype=np.float64).reshape(np.shape(w))
        upd[k] = (np.asarray(w) - w0, np.asarray(got[k], dtype=np.float64).reshape(np.shape(w)) - w0)
    largest = max(float(np.linalg.norm(dw)) for dw, _ in upd.values())
    for k, (dw, dg) in upd.items():
        n = float(np.linalg.norm(dw))
        out[k] = float(np.linalg.norm(dg - dw)) / (n if n > 1e-9 * largest else largest or 1.0)
    return out


def bf16_bounds(case, X, y, Xv, yv, init, want):
    """Per tensor, the bf16 bound on its update error: BF16_FACTOR x the largest error over
    BF16_RUNS runs of the reference with bf16's roundings as random perturbations of at most 2^-8
    of every value trainer stores or converts to bf16 (keras_ref.rounding), and not below one bf16
    rounding of the update itself (2^-8: the model leaves out roundings trainer has, inside an
    op's f32 arithmetic and where the model's points differ from trainer's)."""
    worst = {k: 0.0 for k in want}
    for r in range(BF16_RUNS):
        K.rounding(torch.Generator().manual_seed(1000 + r))
        try:
            perturbed = reference(case, X, y, Xv, yv)[0]
        finally:
            K.rounding(None)
        for k, e in update_errs(perturbed, want, init).items():
            worst[k] = max(worst[k], e)
    return {k: max(BF16_FACTOR * e, K.BF16_U) for k, e in worst.items()}


def fit(errs, bounds):
    """The largest error / bound over tensors, and that tensor."""
    k = max(errs, key=lambda n: errs[n] / bounds[n])
    return errs[k] / bounds[k], k


def draw_data(case):
    """A case's training and validation inputs and labels, from the one random stream."""
    X, Xv = make_inputs(case, N), make_inputs(case, N)
    classes = 2 if case.loss == "binary_crossentropy" else CLASSES
    shape = [N, case.positions] if case.positions else [N]
    g = case.gen or rng
    y, yv = g.integers(0, classes, shape).astype(np.int32), g.integers(0, classes, shape).astype(np.int32)
    if case.ignore is not None:  # sample n keeps its first 1..T labels, the rest are pads (one keeps all)
        for labels in (y, yv):
            keep = g.integers(1, case.positions + 1, N)
            keep[0] = case.positions
            for n in range(N):
                labels[n, keep[n]:] = case.ignore
    return X, Xv, y, yv, classes


def run_case(trainer, work, i, case, precision="fp32"):
    d = os.path.join(work, f"c{i}-{precision}")
    os.makedirs(d, exist_ok=True)
    X, Xv, y, yv, classes = draw_data(case)
    for split, arrays, labels in (("", X, y), ("v", Xv, yv)):
        for name, a in arrays.items():
            save_npy(d, f"{name}{split}.npy", a)
        save_npy(d, f"y{split}.npy", labels)
    init = dict(case.params)
    for layer, st in case.state.items():
        init.update({f"{layer}/{k}": v for k, v in st.items()})
    write_safetensors(os.path.join(d, "w.safetensors"), init)
    cfg = config(case, precision).replace(f"classes: {CLASSES}", f"classes: {classes}")
    run = run_trainer(trainer, d, "run", cfg)
    got = checkpoint(run, STEPS)
    rows = metrics(run)
    want, losses, val = reference(case, X, y, Xv, yv)
    if precision == "bf16":  # errors as fractions of each tensor's bound: within when <= 1
        bounds = bf16_bounds(case, X, y, Xv, yv, init, want)
        ratio, where = fit(update_errs(got, want, init), bounds)
        controls = [(c, fit(update_errs(got, reference(case, X, y, Xv, yv, c)[0], init), bounds)[0])
                    for c in case.controls if c not in case.bf16_blind]
        return ratio, f"{where}, bound {bounds[where]:.2e}", controls
    err, where = max_rel(got, want)
    for e in range(STEPS):
        for col, ref in (("loss", losses[e]), ("val_loss", val[e])):
            r = rel(rows[e][col], ref)
            if r > err:
                err, where = r, f"{col} of epoch {e + 1}"
    controls = []
    for ctl in case.controls:
        cw, cl, cv = reference(case, X, y, Xv, yv, ctl)
        controls.append((ctl, max_rel(got, cw)[0]))
    return err, where, controls


def table(trainer, work, precision, tol):
    ok = True
    only = [c for c in os.environ.get("PEER_ONLY", "").split(",") if c]  # a developer's subset: components
    for i, case in enumerate(cases()):
        if only and case.component not in only:
            continue
        if precision == "bf16" and case.component in ("max_pool2d", "max_pool1d"):
            print(f"{case.component:<18} {(case.variant + ', bf16')[-44:]:<44} {'':>12}  skipped: near-equal values "
                  "make the maximum bf16's choice (bf16_window_ops_test checks it on distinct values)")
            continue
        try:
            err, where, controls = run_case(trainer, work, i, case, precision)
        except RuntimeError as e:
            if precision == "bf16" and "failed (4)" in str(e) and "bf16" in str(e):
                why = [l for l in str(e).splitlines() if "bf16" in l][-1].strip()
                print(f"SKIPPED (cpu-feature): trainer refuses bf16 here: {why}")
                return None
            raise
        good = err <= tol
        ok &= good
        label = case.variant if precision == "fp32" else (case.variant + ", bf16")[-44:]
        print(f"{case.component:<18} {label:<44} {err:>12.3e}  {'ok' if good else f'FAIL (worst {where})'}")
        for ctl, e in controls:
            fails = e > tol
            ok &= fails
            print(f"{'':<18} {'  control: ' + ctl:<44} {e:>12.3e}  {'ok (differs)' if fails else 'FAIL (control within tolerance)'}")
    return ok


def main():
    trainer, work = sys.argv[1], sys.argv[2]
    passes = sys.argv[3:4] or ["fp32", "bf16"]
    os.makedirs(work, exist_ok=True)
    ok = True
    if "fp32" in passes:
        print(f"{'component':<18} {'variant':<44} {'max rel err':>12}  result")
        ok &= table(trainer, work, "fp32", TOL)
        print(f"fp32: tolerance {TOL:g} relative (weights, moving statistics, training and validation loss)")
    else:
        for case in cases():  # the fp32 pass's draws: the bf16 cases' data as in a run of both
            draw_data(case)
    if "bf16" in passes:
        print(f"{'component':<18} {'variant (precision: bf16)':<44} {'err / bound':>12}  result")
        held = table(trainer, work, "bf16", 1.0)
        if held is None:  # trainer refuses bf16 here: a skip, unless the fp32 pass failed
            return 1 if not ok else 77
        ok &= held
        print(f"bf16: each tensor's update error (relative L2) against its own bound, {BF16_FACTOR:g}x the largest of "
              f"{BF16_RUNS} runs of the reference with bf16's roundings as random perturbations; "
              f"{'all within' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
