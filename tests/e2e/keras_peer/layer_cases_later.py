#!/usr/bin/env python3
"""The layer peer check's cases added from 2026-12-02 on (layer_cases.py runs them last): Keras 3's
activations, conv1d, the 1D pools, reshape, up_sampling2d (nearest and bilinear), separable_conv2d,
cropping2d, gru, conv2d_transpose, zero_pad1d, cropping1d, up_sampling1d, bidirectional, repeat_vector,
spatial_dropout1d/2d, gaussian_noise, gaussian_dropout, subtract, average, maximum, minimum, prelu, group_norm, simple_rnn, rescaling and permute. They draw their weights
and data from streams of their own, so that every earlier case draws the weights and data it drew
before (the controls of some, e.g. gelu's other form and attention's unscaled scores, differ from
the truth by little more than the bound: a redraw can bring them within it)."""
import math

import numpy as np

import keras_ref as K  # exits 77 (a skip) when torch cannot be imported
import torch
import torch.nn.functional as F
from layer_cases import HEAD, SEED as K_SEED, Case, head, logits, w


def later_cases(first):
    """The cases, numbered from `first` (their data streams are seeded by their number)."""
    out = []
    late = np.random.default_rng(1202)
    # --- conv1d over a sequence [7, 3]: valid, same with a stride, causal with a dilation
    for variant, opts, kw, steps in [("valid", "kernel: 3", {}, 5),
                                     ("same, strides 2", "kernel: 3, strides: 2, padding: same", {"stride": 2, "padding": "same"}, 4),
                                     ("causal, dilation 2", "kernel: 2, dilation: 2, padding: causal",
                                      {"dilation": 2, "padding": "causal"}, 7)]:
        k = 2 if "causal" in variant else 3
        p = {"c/kernel": w(k, 3, 4, gen=late), "c/bias": w(4, scale=0.5, gen=late), **head(steps * 4, gen=late)}

        def f(P, X, S, t, c, s, kw=kw):
            return logits(P, K.conv1d(X["x"], P["c/kernel"], P["c/bias"], **kw))

        out.append(Case("conv1d", variant, [f"{{name: c, type: conv1d, filters: 4, {opts}}}"] + HEAD, p, f,
                        inputs={"x": ("vector", [7, 3])}, gen=np.random.default_rng(first + len(out))))
    # --- max_pool1d, avg_pool1d after a conv1d: Keras's pooling of a sequence (the 2D pools over one row)
    for comp, opts, kw, steps in [("max_pool1d", "pool: 2", {"pool": (1, 2), "strides": (1, 2)}, 3),
                                  ("avg_pool1d", "pool: 3, strides: 2, padding: same", {"pool": (1, 3), "strides": (1, 2), "padding": "same"}, 3)]:
        p = {"c/kernel": w(2, 3, 4, gen=late), **head(steps * 4, gen=late)}

        def f(P, X, S, t, c, s, comp=comp, kw=kw):
            h = K.conv1d(X["x"], P["c/kernel"]).unsqueeze(1)
            pooled = (K.max_pool2d if comp == "max_pool1d" else K.avg_pool2d)(h, **kw)
            return logits(P, pooled.squeeze(1))

        out.append(Case(comp, opts, ["{name: c, type: conv1d, filters: 4, kernel: 2, use_bias: false}",
                                     f"{{name: p, type: {comp}, {opts}}}"] + HEAD, p, f, inputs={"x": ("vector", [7, 3])},
                        gen=np.random.default_rng(first + len(out))))
    # --- reshape: a dense's 12 values as the image [2, 3, 2] a conv2d reads, then a sequence [3, 2]
    p = {"d/kernel": w(5, 12, gen=late), "d/bias": w(12, scale=0.5, gen=late), "c/kernel": w(2, 2, 2, 3, gen=late),
         **head(6, gen=late)}

    def f_reshape(P, X, S, t, c, s):
        h = K.dense(X["x"], P["d/kernel"], P["d/bias"]).reshape(-1, 2, 3, 2)  # NHWC, as Keras's Reshape
        return logits(P, K.conv2d(h, P["c/kernel"]).reshape(-1, 2, 3))

    out.append(Case("reshape", "flat -> image -> sequence", ["{name: d, type: dense, units: 12}",
                                                             "{name: r, type: reshape, target_shape: [2, 3, 2]}",
                                                             "{name: c, type: conv2d, filters: 3, kernel: 2, use_bias: false}",
                                                             "{name: s, type: reshape, target_shape: [-1, 3]}"] + HEAD, p,
                    f_reshape, inputs={"x": ("vector", [5])}, gen=np.random.default_rng(first + len(out))))
    # --- up_sampling2d (nearest): each pixel repeated 2 x 3 times between two convolutions
    p = {"a/kernel": w(3, 3, 3, 2, gen=late), "b/kernel": w(2, 2, 2, 3, gen=late), **head(2 * 3 * 3, gen=late)}

    def f_up(P, X, S, t, c, s):
        h = K.conv2d(X["x"], P["a/kernel"], strides=(2, 2))  # [2, 3, 2] from [6, 7, 3]
        h = h.repeat_interleave(2, dim=1).repeat_interleave(3, dim=2)  # keras.layers.UpSampling2D((2, 3))
        return logits(P, K.conv2d(h, P["b/kernel"], strides=(2, 3)))

    out.append(Case("up_sampling2d", "size [2, 3], nearest",
                    ["{name: a, type: conv2d, filters: 2, kernel: 3, strides: 2, use_bias: false}",
                     "{name: up, type: up_sampling2d, size: [2, 3]}",
                     "{name: b, type: conv2d, filters: 3, kernel: 2, strides: [2, 3], use_bias: false}"] + HEAD, p, f_up,
                    gen=np.random.default_rng(first + len(out))))
    # --- separable_conv2d: depthwise 3x3 'same' stride 2 (multiplier 2), then the pointwise 1x1 with the bias
    p = {"s/depthwise_kernel": w(3, 3, 3, 2, gen=late), "s/pointwise_kernel": w(1, 1, 6, 4, gen=late),
         "s/bias": w(4, scale=0.5, gen=late), **head(3 * 4 * 4, gen=late)}

    def f_sep(P, X, S, t, c, s):
        h = K.depthwise_conv2d(X["x"], P["s/depthwise_kernel"], strides=(2, 2), padding="same")
        return logits(P, K.conv2d(h, P["s/pointwise_kernel"], P["s/bias"]))

    out.append(Case("separable_conv2d", "3x3 'same' stride 2, multiplier 2",
                    ["{name: s, type: separable_conv2d, filters: 4, kernel: 3, strides: 2, padding: same, depth_multiplier: 2}"]
                    + HEAD, p, f_sep, gen=np.random.default_rng(first + len(out))))
    # --- cropping2d: [[1, 0], [2, 1]] of a 'same' convolution's [6, 7, 3] output
    p = {"c/kernel": w(3, 3, 3, 3, gen=late), **head(5 * 4 * 3, gen=late)}

    def f_crop(P, X, S, t, c, s):
        return logits(P, K.conv2d(X["x"], P["c/kernel"], padding="same")[:, 1:, 2:-1, :])  # keras.layers.Cropping2D

    out.append(Case("cropping2d", "[[1, 0], [2, 1]]", ["{name: c, type: conv2d, filters: 3, kernel: 3, padding: same, use_bias: false}",
                                                      "{name: crop, type: cropping2d, cropping: [[1, 0], [2, 1]]}"] + HEAD,
                    p, f_crop, gen=np.random.default_rng(first + len(out))))
    # --- gru (Keras's reset_after form): every step, then the last; its control applies the reset gate before
    # the recurrent projection (Keras 1's reset_after=False)
    for seq in (True, False):
        p = {"gru/kernel": w(3, 12, gen=late), "gru/recurrent_kernel": w(4, 12, gen=late),
             "gru/bias": w(2, 12, scale=0.3, gen=late), **head(5 * 4 if seq else 4, gen=late)}

        def f_gru(P, X, S, t, c, s, seq=seq):
            return logits(P, K.gru(X["x"], P["gru/kernel"], P["gru/recurrent_kernel"], P["gru/bias"], seq,
                                   reset_after=c != "reset before the recurrent projection"))

        out.append(Case("gru", "return_sequences" if seq else "last state",
                        [f"{{name: gru, type: gru, units: 4, return_sequences: {str(seq).lower()}}}"] + (HEAD if seq else HEAD[1:]),
                        p, f_gru, inputs={"x": ("vector", [5, 3])}, gen=np.random.default_rng(first + len(out)),
                        controls=() if seq else ("reset before the recurrent projection",)))
    # --- conv2d_transpose: 'same' at stride 2 (TensorFlow's crop: the smaller half before), valid with
    # output_padding, and a kernel smaller than its stride (rows no window reaches); 3 filters on 3 channels,
    # so that the controls' other kernel layout has the same shape
    for variant, opts, kw, shape_out, controls in [
        ("3x3 'same' stride 2", "kernel: 3, strides: 2, padding: same", {"strides": (2, 2), "padding": "same"},
         (12, 14, 3), ("cropped as PyTorch's padding=1, output_padding=1", "kernel as [kh, kw, in, out]")),
        ("[2, 3] valid strides [2, 3], output_padding [1, 0]", "kernel: [2, 3], strides: [2, 3], output_padding: [1, 0]",
         {"strides": (2, 3), "output_padding": (1, 0)}, (13, 21, 3), ()),
        ("1x1 valid stride 2 (a kernel below its stride)", "kernel: 1, strides: 2", {"strides": (2, 2)}, (12, 14, 3), ()),
    ]:
        kh, kwid = (2, 3) if "[2, 3]" in variant else (1, 1) if "1x1" in variant else (3, 3)
        p = {"t/kernel": w(kh, kwid, 3, 3, gen=late), "t/bias": w(3, scale=0.5, gen=late),
             **head(int(np.prod(shape_out)), gen=late)}

        def f_t(P, X, S, t, c, s, kw=kw):
            k = P["t/kernel"]
            if c == "kernel as [kh, kw, in, out]":
                k = k.permute(0, 1, 3, 2)
            if c == "cropped as PyTorch's padding=1, output_padding=1":  # nn.ConvTranspose2d's usual 2x upsampling
                h = F.conv_transpose2d(X["x"].permute(0, 3, 1, 2), k.permute(3, 2, 0, 1), P["t/bias"], stride=2,
                                       padding=1, output_padding=1).permute(0, 2, 3, 1)
                return logits(P, h)
            return logits(P, K.conv2d_transpose(X["x"], k, P["t/bias"], **kw))

        out.append(Case("conv2d_transpose", variant, [f"{{name: t, type: conv2d_transpose, filters: 3, {opts}}}"] + HEAD,
                        p, f_t, gen=np.random.default_rng(first + len(out)), controls=controls))
    # --- up_sampling2d, bilinear (tf.image.resize's half-pixel centres: PyTorch's align_corners=False)
    p = {"a/kernel": w(3, 3, 3, 2, gen=late), "b/kernel": w(2, 2, 2, 3, gen=late), **head(2 * 3 * 3, gen=late)}

    def f_bilinear(P, X, S, t, c, s):
        h = K.conv2d(X["x"], P["a/kernel"], strides=(2, 2))  # [2, 3, 2] from [6, 7, 3]
        h = K.q(F.interpolate(h.permute(0, 3, 1, 2), scale_factor=(2, 3), mode="bilinear",
                              align_corners=c == "align_corners=True").permute(0, 2, 3, 1))
        return logits(P, K.conv2d(h, P["b/kernel"], strides=(2, 3)))

    out.append(Case("up_sampling2d", "size [2, 3], bilinear",
                    ["{name: a, type: conv2d, filters: 2, kernel: 3, strides: 2, use_bias: false}",
                     "{name: up, type: up_sampling2d, size: [2, 3], interpolation: bilinear}",
                     "{name: b, type: conv2d, filters: 3, kernel: 2, strides: [2, 3], use_bias: false}"] + HEAD, p,
                    f_bilinear, gen=np.random.default_rng(first + len(out)), controls=("align_corners=True",)))
    # --- zero_pad1d, cropping1d, up_sampling1d after a conv1d over [7, 3] (5 steps of 4 channels)
    for comp, opts, fn, steps in [
        ("zero_pad1d", "padding: [2, 1]", lambda h: F.pad(h, (0, 0, 2, 1)), 8),  # keras.layers.ZeroPadding1D((2, 1))
        ("cropping1d", "cropping: [1, 2]", lambda h: h[:, 1:-2], 2),  # keras.layers.Cropping1D((1, 2))
        ("up_sampling1d", "size: 3", lambda h: h.repeat_interleave(3, dim=1), 15),  # keras.layers.UpSampling1D(3)
    ]:
        p = {"c/kernel": w(3, 3, 4, gen=late), **head(steps * 4, gen=late)}

        def f_seq(P, X, S, t, c, s, fn=fn):
            return logits(P, fn(K.conv1d(X["x"], P["c/kernel"])))

        out.append(Case(comp, opts, ["{name: c, type: conv1d, filters: 4, kernel: 3, use_bias: false}",
                                     f"{{name: s, type: {comp}, {opts}}}"] + HEAD, p, f_seq,
                        inputs={"x": ("vector", [7, 3])}, gen=np.random.default_rng(first + len(out))))
    # --- bidirectional: lstm and gru, each merge mode and both output forms; the controls leave the backward
    # half's sequence in its own step order, or run it over the steps in order
    for kind, merge, seq in (("lstm", "concat", True), ("lstm", "sum", False), ("gru", "ave", True), ("gru", "mul", False)):
        g = 4 if kind == "lstm" else 3
        p = {}
        for half in ("forward", "backward"):
            p[f"bi/{half}_{kind}/kernel"] = w(3, 4 * g, gen=late)
            p[f"bi/{half}_{kind}/recurrent_kernel"] = w(4, 4 * g, gen=late)
            p[f"bi/{half}_{kind}/bias"] = w(4 * g, scale=0.2, gen=late) if kind == "lstm" else w(2, 4 * g, scale=0.2, gen=late)
        width = 8 if merge == "concat" else 4
        p.update(head(5 * width if seq else width, gen=late))

        def f_bi(P, X, S, t, c, s, kind=kind, merge=merge, seq=seq):
            rnn = K.lstm if kind == "lstm" else K.gru

            def half(name):
                return lambda x: rnn(x, P[f"bi/{name}_{kind}/kernel"], P[f"bi/{name}_{kind}/recurrent_kernel"],
                                     P[f"bi/{name}_{kind}/bias"], seq)

            return logits(P, K.bidirectional(X["x"], half("forward"), half("backward"), merge, seq,
                                             control=c if c else None))

        out.append(Case("bidirectional", f"{kind}, merge {merge}, " + ("return_sequences" if seq else "last state"),
                        [f"{{name: bi, type: bidirectional, layer: {{type: {kind}, units: 4, return_sequences: "
                         f"{str(seq).lower()}}}, merge_mode: {merge}}}"] + (HEAD if seq else HEAD[1:]),
                        p, f_bi, inputs={"x": ("vector", [5, 3])}, gen=np.random.default_rng(first + len(out)),
                        controls=("backward sequence not reversed back",) if seq else ("backward half over the steps in order",)))
    # --- repeat_vector: an lstm's last state (an encoder's summary) fed to every step of a second lstm
    # (a sequence-to-sequence decoder); the control feeds the summary to the first step only
    p = {"enc/kernel": w(3, 16, gen=late), "enc/recurrent_kernel": w(4, 16, gen=late), "enc/bias": w(16, scale=0.2, gen=late),
         "dec/kernel": w(4, 12, gen=late), "dec/recurrent_kernel": w(3, 12, gen=late), "dec/bias": w(12, scale=0.2, gen=late),
         **head(4 * 3, gen=late)}

    def f_repeat(P, X, S, t, c, s):
        h = K.lstm(X["x"], P["enc/kernel"], P["enc/recurrent_kernel"], P["enc/bias"], False)
        r = h.unsqueeze(1).repeat(1, 4, 1)  # keras.layers.RepeatVector(4)
        if c == "the summary at the first step only":
            r = torch.cat([h.unsqueeze(1), torch.zeros_like(r[:, 1:])], dim=1)
        return logits(P, K.lstm(r, P["dec/kernel"], P["dec/recurrent_kernel"], P["dec/bias"], True))

    out.append(Case("repeat_vector", "n 4, between an encoder lstm and a decoder lstm",
                    ["{name: enc, type: lstm, units: 4}", "{name: rep, type: repeat_vector, n: 4}",
                     "{name: dec, type: lstm, units: 3, return_sequences: true}"] + HEAD, p, f_repeat,
                    inputs={"x": ("vector", [5, 3])}, gen=np.random.default_rng(first + len(out)),
                    controls=("the summary at the first step only",)))
    # --- spatial_dropout1d / 2d after a convolution (node 1), rate 0.5 with trainer's mask: the elements' mask of
    # an [N, C] tensor, each channel of a sample kept or dropped at every step or pixel; the control drops
    # elements instead (the mask drawn over every element)
    for comp, conv, shape, inp in [("spatial_dropout1d", "conv1d", (5, 4), [7, 3]), ("spatial_dropout2d", "conv2d", (4, 5, 4), None)]:
        k = w(3, 3, 4, gen=late) if conv == "conv1d" else w(3, 3, 3, 4, gen=late)
        p = {"c/kernel": k, **head(int(np.prod(shape)), gen=late)}

        def f_sd(P, X, S, training, c, step, conv=conv):
            h = K.conv1d(X["x"], P["c/kernel"]) if conv == "conv1d" else K.conv2d(X["x"], P["c/kernel"])
            if training:
                n, ch = h.shape[0], h.shape[-1]
                if c == "elements dropped, not channels":
                    mask = K.dropout_mask(h.numel(), K_SEED, step, 1, 0.5).reshape(h.shape)
                else:
                    mask = K.dropout_mask(n * ch, K_SEED, step, 1, 0.5).reshape([n] + [1] * (h.dim() - 2) + [ch])
                h = h * mask * 2.0
            return logits(P, h)

        out.append(Case(comp, "rate 0.5 (trainer's mask)",
                        [f"{{name: c, type: {conv}, filters: 4, kernel: 3, use_bias: false}}",
                         f"{{name: s, type: {comp}, rate: 0.5}}"] + HEAD, p, f_sd,
                        inputs={"x": ("vector", inp)} if inp else None, gen=np.random.default_rng(first + len(out)),
                        controls=("elements dropped, not channels",)))
    # --- gaussian_noise on the input (node 0) and gaussian_dropout after a conv2d (node 1), with trainer's normal
    # values; the controls take the variance for the stddev (noise) and the rate for it (dropout)
    p = {"d1/kernel": w(6, 5, gen=late), "d1/bias": w(5, scale=0.1, gen=late), **head(5, gen=late)}

    def f_gn(P, X, S, training, c, step):
        x = X["x"]
        if training:
            sd = 0.3 ** 2 if c == "variance taken for the stddev" else 0.3
            x = x + sd * K.gaussian_normal(x.numel(), K_SEED, step, 0).reshape(x.shape)
        return logits(P, torch.relu(K.dense(x, P["d1/kernel"], P["d1/bias"])))

    out.append(Case("gaussian_noise", "stddev 0.3 (trainer's normal values)",
                    ["{name: g, type: gaussian_noise, stddev: 0.3}", "{name: d1, type: dense, units: 5}",
                     "{name: relu, type: relu}"] + HEAD[1:], p, f_gn, inputs={"x": ("vector", [6])},
                    gen=np.random.default_rng(first + len(out)), controls=("variance taken for the stddev",)))
    p = {"c/kernel": w(3, 3, 3, 4, gen=late), **head(4 * 5 * 4, gen=late)}

    def f_gd(P, X, S, training, c, step):
        h = K.conv2d(X["x"], P["c/kernel"])
        if training:
            sd = 0.2 if c == "rate taken for the stddev" else math.sqrt(0.2 / 0.8)
            h = h * (1.0 + sd * K.gaussian_normal(h.numel(), K_SEED, step, 1).reshape(h.shape))
        return logits(P, h)

    out.append(Case("gaussian_dropout", "rate 0.2 (trainer's normal values)",
                    ["{name: c, type: conv2d, filters: 4, kernel: 3, use_bias: false}",
                     "{name: g, type: gaussian_dropout, rate: 0.2}"] + HEAD, p, f_gd,
                    gen=np.random.default_rng(first + len(out)), controls=("rate taken for the stddev",)))
    # --- subtract, average, maximum, minimum of conv branches [6, 7, 3] (Keras's merges: maximum chained as
    # Keras chains it; equal values do not occur in these data, so torch.maximum's even split of ties never
    # meets Keras's first-input rule, which the op's tests check); the controls are the mistakes a user
    # would make: the operands swapped, the sum for the mean, no gradient to the last input, maximum for minimum.
    # In bf16 the maximum's choice between values within a rounding of each other is bf16's, so the bound of the
    # branches' updates is wide there (0.64 of it for the control without e's gradient): the fp32 pass runs that one
    branch = ["{name: a, type: conv2d, filters: 3, kernel: 3, padding: same, use_bias: false, inputs: [x]}",
              "{name: b, type: conv2d, filters: 3, kernel: 1, use_bias: false, inputs: [x]}",
              "{name: e, type: conv2d, filters: 3, kernel: 3, padding: same, use_bias: false, inputs: [x]}"]
    for comp, ins, control in [("subtract", "[a, b]", "the operands swapped"), ("average", "[a, b, e]", "the sum, not the mean"),
                               ("maximum", "[a, b, e]", "no gradient to the last input"), ("minimum", "[b, a, e]", "maximum taken")]:
        p = {"a/kernel": w(3, 3, 3, 3, gen=late), "b/kernel": w(1, 1, 3, 3, gen=late), **head(6 * 7 * 3, gen=late)}
        if comp != "subtract":
            p["e/kernel"] = w(3, 3, 3, 3, gen=late)

        def f_merge(P, X, S, t, c, s, comp=comp):
            a = K.conv2d(X["x"], P["a/kernel"], padding="same")
            b = K.conv2d(X["x"], P["b/kernel"])
            e = K.conv2d(X["x"], P["e/kernel"], padding="same") if "e/kernel" in P else None
            if comp == "subtract":
                h = b - a if c else a - b
            elif comp == "average":
                h = (a + b + e) / (1.0 if c else 3.0)
            elif comp == "maximum":
                h = torch.maximum(torch.maximum(a, b), e.detach() if c else e) + (0.0 * e if c else 0.0)
            else:
                pick = torch.maximum if c else torch.minimum
                h = pick(pick(b, a), e)
            return logits(P, K.q(h))

        out.append(Case(comp, f"conv branches {ins}", branch[:2 if comp == "subtract" else 3] +
                        [f"{{name: m, type: {comp}, inputs: {ins}}}"] + HEAD, p, f_merge,
                        inputs={"x": ("image", [6, 7, 3])}, gen=np.random.default_rng(first + len(out)), controls=(control,),
                        bf16_blind=(control,) if comp == "maximum" else ()))
    # --- prelu after a conv2d, one slope per channel (shared_axes [1, 2], as nn.PReLU(C)), and after a dense, a
    # slope per feature; alpha drawn around 0.25 with both signs; the control applies the slope to x > 0
    for variant, conv in [("shared_axes [1, 2] after a conv2d", True), ("a slope per feature after a dense", False)]:
        alpha = (w(1, 1, 4, scale=0.4, gen=late) + 0.25) if conv else (w(6, scale=0.4, gen=late) + 0.25)
        first_layer = {"c/kernel": w(3, 3, 3, 4, gen=late)} if conv else {"d1/kernel": w(5, 6, gen=late), "d1/bias": w(6, gen=late)}
        p = {**first_layer, "p/alpha": alpha, **head(4 * 5 * 4 if conv else 6, gen=late)}

        def f_prelu(P, X, S, t, c, s, conv=conv):
            h = K.conv2d(X["x"], P["c/kernel"]) if conv else K.dense(X["x"], P["d1/kernel"], P["d1/bias"])
            a = P["p/alpha"]
            h = torch.where(h > 0, a * h, h) if c else torch.where(h > 0, h, a * h)
            return logits(P, K.q(h))

        layers = ["{name: c, type: conv2d, filters: 4, kernel: 3, use_bias: false}",
                  "{name: p, type: prelu, shared_axes: [1, 2]}"] if conv else \
                 ["{name: d1, type: dense, units: 6}", "{name: p, type: prelu}"]
        out.append(Case("prelu", variant, layers + (HEAD if conv else HEAD[1:]), p, f_prelu,
                        inputs=None if conv else {"x": ("vector", [5])}, gen=np.random.default_rng(first + len(out)),
                        controls=("the slope applied to x > 0",)))
    # --- group_norm after a conv2d [4, 5, 6]: 3 groups of 2 consecutive channels, Keras's defaults (epsilon 1e-3,
    # the biased variance over each group's positions and channels); the control groups the channels interleaved
    # (channel c in group c % 3), a layout slip between NCHW and NHWC code
    p = {"c/kernel": w(3, 3, 3, 6, gen=late), "gn/gamma": 1.0 + w(6, scale=0.3, gen=late), "gn/beta": w(6, scale=0.3, gen=late),
         **head(4 * 5 * 6, gen=late)}

    def f_gn(P, X, S, t, c, s):
        h = K.conv2d(X["x"], P["c/kernel"])  # [N, 4, 5, 6]
        n = h.shape[0]
        g = h.reshape(n, 20, 2, 3).transpose(2, 3) if c else h.reshape(n, 20, 3, 2)  # [N, positions, group, member]
        mean = g.mean(dim=(1, 3), keepdim=True)
        var = ((g - mean) ** 2).mean(dim=(1, 3), keepdim=True)
        z = (g - mean) / torch.sqrt(var + 1e-3)
        z = z.transpose(2, 3).reshape(h.shape) if c else z.reshape(h.shape)
        return logits(P, z * P["gn/gamma"] + P["gn/beta"])

    out.append(Case("group_norm", "3 groups after a conv2d, Keras defaults",
                    ["{name: c, type: conv2d, filters: 6, kernel: 3, use_bias: false}", "{name: gn, type: group_norm, groups: 3}"] + HEAD,
                    p, f_gn, gen=np.random.default_rng(first + len(out)), controls=("channels grouped interleaved",)))
    # --- simple_rnn (Keras's SimpleRNN, h_t = act(x_t·W + b + h_{t-1}·R)): tanh every step, relu the last state;
    # the control takes the recurrent kernel transposed (PyTorch's weight_hh multiplies h from the other side)
    for seq, act in ((True, "tanh"), (False, "relu")):
        p = {"rnn/kernel": w(3, 4, gen=late), "rnn/recurrent_kernel": w(4, 4, scale=0.4, gen=late),
             "rnn/bias": w(4, scale=0.3, gen=late), **head(5 * 4 if seq else 4, gen=late)}

        def f_rnn(P, X, S, t, c, s, seq=seq, act=act):
            x, r = X["x"], P["rnn/recurrent_kernel"]
            r = r.T if c else r
            h = torch.zeros(x.shape[0], 4, dtype=x.dtype)
            hs = []
            for step in range(x.shape[1]):
                v = x[:, step] @ P["rnn/kernel"] + P["rnn/bias"] + h @ r
                h = torch.tanh(v) if act == "tanh" else torch.relu(v)
                hs.append(h)
            return logits(P, torch.stack(hs, dim=1) if seq else h)

        out.append(Case("simple_rnn", ("return_sequences, " if seq else "last state, ") + act,
                        [f"{{name: rnn, type: simple_rnn, units: 4, activation: {act}, return_sequences: {str(seq).lower()}}}"] +
                        (HEAD if seq else HEAD[1:]), p, f_rnn, inputs={"x": ("vector", [5, 3])},
                        gen=np.random.default_rng(first + len(out)), controls=("recurrent kernel transposed",)))
    # --- rescaling per channel before a conv2d (Keras's Rescaling(scale=[..], offset=[..]): x·scale + offset); the
    # control adds the offset before scaling, (x + offset)·scale
    p = {"c/kernel": w(3, 3, 3, 4, gen=late), **head(4 * 5 * 4, gen=late)}
    scale, offset = [0.5, 2.0, -1.0], [0.1, 0.0, 0.3]

    def f_rescale(P, X, S, t, c, s):
        sc, of = torch.tensor(scale, dtype=X["x"].dtype), torch.tensor(offset, dtype=X["x"].dtype)
        h = (X["x"] + of) * sc if c else X["x"] * sc + of
        return logits(P, K.conv2d(h, P["c/kernel"]))

    out.append(Case("rescaling", "per channel before a conv2d",
                    [f"{{name: r, type: rescaling, scale: {scale}, offset: {offset}}}",
                     "{name: c, type: conv2d, filters: 4, kernel: 3, use_bias: false}"] + HEAD, p, f_rescale,
                    gen=np.random.default_rng(first + len(out)), controls=("offset added before scaling",)))
    # --- permute (Keras's Permute((2, 1))) between a conv1d and a dense: the dense then mixes each channel's steps;
    # the control reshapes instead ([T, C] read as [C, T], the slip Permute is for)
    p = {"c/kernel": w(3, 3, 4, gen=late), "d/kernel": w(5, 3, gen=late), "d/bias": w(3, scale=0.2, gen=late),
         **head(4 * 3, gen=late)}

    def f_permute(P, X, S, t, c, s):
        h = K.conv1d(X["x"], P["c/kernel"])  # [N, 5, 4]
        h = h.reshape(h.shape[0], 4, 5) if c else h.transpose(1, 2)
        return logits(P, K.dense(h, P["d/kernel"], P["d/bias"]))

    out.append(Case("permute", "dims [2, 1] between a conv1d and a dense",
                    ["{name: c, type: conv1d, filters: 4, kernel: 3, use_bias: false}", "{name: pm, type: permute, dims: [2, 1]}",
                     "{name: d, type: dense, units: 3}"] + HEAD, p, f_permute, inputs={"x": ("vector", [7, 3])},
                    gen=np.random.default_rng(first + len(out)), controls=("reshaped, not permuted",)))
    return out
