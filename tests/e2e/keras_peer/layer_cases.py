#!/usr/bin/env python3
"""The layer peer check's cases (layers.py): each a small model, its initial weights and its forward pass
written to Keras 3's definitions (keras_ref.py), with its negative controls."""
import numpy as np

import keras_ref as K  # exits 77 (a skip) when torch cannot be imported
import torch

N, CLASSES, STEPS, LR, SEED = 4, 3, 2, 0.1, 1
IMG = [6, 7, 3]  # an even and an odd side: 'same' stride 2 pads (0, 1) rows and (1, 1) columns


class Case:
    """component, variant, the model's layers (YAML flow maps), its input(s), the initial weights,
    the reference forward f(P, X, S, training, ctl, step) -> logits, the loss, negative controls."""

    def __init__(self, component, variant, layers, params, forward, inputs=None, loss="sparse_categorical_crossentropy",
                 smoothing=0.0, state=None, controls=(), bf16_blind=(), positions=0, ignore=None, gen=None):
        self.component, self.variant, self.layers, self.params = component, variant, layers, params
        self.positions = positions  # > 0: a label per position (labels [N, positions], logits [N, positions, K])
        self.ignore = ignore  # train.ignore_class: each sample's labels after a random length are this pad
        self.forward, self.loss, self.smoothing, self.controls = forward, loss, smoothing, controls
        self.bf16_blind = bf16_blind  # controls whose difference bf16's rounding covers (not run in bf16)
        self.inputs = inputs or {"x": ("image", IMG)}
        self.state = state or {}
        self.gen = gen  # the stream its data is drawn from (None: the shared `rng`, in case order)


rng = np.random.default_rng(11)


def w(*shape, scale=0.5, gen=None):
    return ((gen or rng).standard_normal(shape) * scale).astype(np.float32)


def head(units_in, gen=None):  # the classifier every image case ends with: dense -> softmax
    return {"logits/kernel": w(units_in, CLASSES, gen=gen), "logits/bias": w(CLASSES, scale=0.1, gen=gen)}


HEAD = ["{name: flat, type: flatten}", f"{{name: logits, type: dense, units: {CLASSES}}}", "{name: out, type: softmax}"]


def logits(P, h):
    return K.dense(K.flatten(h), P["logits/kernel"], P["logits/bias"], f32=True)


def bn_state(c):
    return {"moving_mean": np.zeros(c, np.float32) + w(c, scale=0.1), "moving_variance": np.ones(c, np.float32) + np.abs(w(c, scale=0.2))}


def cases():
    out = []
    # --- conv2d: TensorFlow's 'same' padding, strides, dilation, the kernel layout.
    for variant, opts, kw, shape_out, controls in [
        ("3x3 'same' stride 1", "kernel: 3, padding: same", {"padding": "same"}, (6, 7, 4), ()),
        ("3x3 'same' stride 2 (uneven padding)", "kernel: 3, strides: 2, padding: same",
         {"padding": "same", "strides": (2, 2)}, (3, 4, 4), ("symmetric padding", "kernel as [out, in, kh, kw]")),
        ("3x3 'valid' stride 2", "kernel: 3, strides: 2", {"strides": (2, 2)}, (2, 3, 4), ()),
        ("3x3 'same' dilation 2", "kernel: 3, dilation: 2, padding: same", {"padding": "same", "dilation": (2, 2)},
         (6, 7, 4), ()),
    ]:
        p = {"conv/kernel": w(3, 3, 3, 4), "conv/bias": w(4, scale=0.1), **head(int(np.prod(shape_out)))}

        def f(P, X, S, training, ctl, step, kw=kw):
            h = K.conv2d(X["x"], P["conv/kernel"], P["conv/bias"], symmetric=ctl == "symmetric padding",
                         raw_layout=ctl == "kernel as [out, in, kh, kw]", **kw)
            return logits(P, h)

        out.append(Case("conv2d", variant, [f"{{name: conv, type: conv2d, filters: 4, {opts}}}"] + HEAD, p, f,
                        controls=controls))
    p = {"conv/kernel": w(1, 1, 3, 5), **head(6 * 7 * 5)}
    out.append(Case("conv2d", "1x1, no bias", ["{name: conv, type: conv2d, filters: 5, kernel: 1, use_bias: false}"] + HEAD,
                    p, lambda P, X, S, t, c, s: logits(P, K.conv2d(X["x"], P["conv/kernel"]))))

    # --- depthwise_conv2d: [kh, kw, C, M], output channel c·M + m.
    p = {"dw/depthwise_kernel": w(3, 3, 3, 2), "dw/bias": w(6, scale=0.1), **head(6 * 7 * 6)}
    out.append(Case("depthwise_conv2d", "3x3 'same', multiplier 2",
                    ["{name: dw, type: depthwise_conv2d, kernel: 3, padding: same, depth_multiplier: 2}"] + HEAD, p,
                    lambda P, X, S, t, c, s: logits(P, K.depthwise_conv2d(X["x"], P["dw/depthwise_kernel"], P["dw/bias"],
                                                                         padding="same"))))
    p = {"dw/depthwise_kernel": w(3, 3, 3, 1), **head(3 * 4 * 3)}
    out.append(Case("depthwise_conv2d", "3x3 'same' stride 2, no bias",
                    ["{name: dw, type: depthwise_conv2d, kernel: 3, strides: 2, padding: same, use_bias: false}"] + HEAD, p,
                    lambda P, X, S, t, c, s: logits(P, K.depthwise_conv2d(X["x"], P["dw/depthwise_kernel"],
                                                                         strides=(2, 2), padding="same"))))

    # --- batch norm after a convolution (training, and inference in validation).
    p = {"conv/kernel": w(3, 3, 3, 4), "bn/gamma": 1 + w(4, scale=0.2), "bn/beta": w(4, scale=0.2), **head(6 * 7 * 4)}

    for unbiased in (False, True):
        def f_bn(P, X, S, training, ctl, step, unbiased=unbiased):
            h = K.conv2d(X["x"], P["conv/kernel"], padding="same")
            if training:
                h = K.batchnorm_train(h, P["bn/gamma"], P["bn/beta"], S["bn"], 0.9, 1e-3,
                                      unbiased=unbiased != (ctl == "the other batch variance"),
                                      flipped_momentum=ctl == "momentum as PyTorch's")
            else:
                h = K.batchnorm_infer(h, P["bn/gamma"], P["bn/beta"], S["bn"], 1e-3)
            return logits(P, torch.relu(h))

        out.append(Case("batchnorm", "after conv, momentum 0.9, train + inference" if not unbiased
                        else "moving_variance: unbiased (PyTorch's form)",
                        ["{name: conv, type: conv2d, filters: 4, kernel: 3, padding: same, use_bias: false}",
                         "{name: bn, type: batchnorm, momentum: 0.9" + (", moving_variance: unbiased}" if unbiased else "}"),
                         "{name: relu, type: relu}"] + HEAD, p, f_bn, state={"bn": bn_state(4)},
                        controls=("the other batch variance",) + (() if unbiased else ("momentum as PyTorch's",)),
                        bf16_blind=("the other batch variance",)))
    p = {"d1/kernel": w(5, 6), "bn/gamma": 1 + w(6, scale=0.2), "bn/beta": w(6, scale=0.2), **head(6)}

    def f_bn2(P, X, S, training, ctl, step):
        h = K.dense(X["x"], P["d1/kernel"])
        h = (K.batchnorm_train(h, P["bn/gamma"], P["bn/beta"], S["bn"], 0.99, 1e-3,
                               unbiased=ctl == "the other batch variance") if training
             else K.batchnorm_infer(h, P["bn/gamma"], P["bn/beta"], S["bn"], 1e-3))
        return logits(P, K.ACTIVATIONS["tanh"](h))

    out.append(Case("batchnorm", "on dense features, Keras defaults",
                    ["{name: d1, type: dense, units: 6, use_bias: false}", "{name: bn, type: batchnorm}", "{name: act, type: tanh}"]
                    + HEAD[1:], p, f_bn2, inputs={"x": ("vector", [5])}, state={"bn": bn_state(6)},
                    controls=("the other batch variance",)))

    # --- pooling
    for comp, variant, opts, fn, shape_out, controls in [
        ("max_pool2d", "2x2 'valid'", "pool: 2", lambda x, c: K.max_pool2d(x, (2, 2), (2, 2)), (3, 3, 3), ()),
        ("max_pool2d", "3x3 stride 2 'same'", "pool: 3, strides: 2, padding: same",
         lambda x, c: K.max_pool2d(x, (3, 3), (2, 2), "same"), (3, 4, 3), ()),
        ("avg_pool2d", "2x2 'valid'", "pool: 2", lambda x, c: K.avg_pool2d(x, (2, 2), (2, 2)), (3, 3, 3), ()),
        ("avg_pool2d", "3x3 stride 2 'same' (padding not counted)", "pool: 3, strides: 2, padding: same",
         lambda x, c: K.avg_pool2d(x, (3, 3), (2, 2), "same", count_padding=c == "padding counted"), (3, 4, 3),
         ("padding counted",)),
    ]:
        p = {"conv/kernel": w(3, 3, 3, 3), **head(int(np.prod(shape_out)))}

        def f(P, X, S, t, ctl, step, fn=fn):
            return logits(P, fn(K.conv2d(X["x"], P["conv/kernel"], padding="same"), ctl))

        out.append(Case(comp, variant, ["{name: conv, type: conv2d, filters: 3, kernel: 3, padding: same, use_bias: false}",
                                        f"{{name: pool, type: {comp}, {opts}}}"] + HEAD, p, f, controls=controls))
    p = {"conv/kernel": w(3, 3, 3, 5), **head(5)}
    out.append(Case("global_avg_pool2d", "", ["{name: conv, type: conv2d, filters: 5, kernel: 3, use_bias: false}",
                                               "{name: gap, type: global_avg_pool2d}"] + HEAD[1:], p,
                    lambda P, X, S, t, c, s: logits(P, K.global_avg_pool2d(K.conv2d(X["x"], P["conv/kernel"])))))

    # --- global_max_pool2d; multiply: a squeeze-and-excitation gate [C] over [H, W, C] (Keras's
    # merge expands the smaller input at axis 1, so it broadcasts over the pixels)
    p = {"conv/kernel": w(3, 3, 3, 5), **head(5)}
    out.append(Case("global_max_pool2d", "", ["{name: conv, type: conv2d, filters: 5, kernel: 3, use_bias: false}",
                                               "{name: gmp, type: global_max_pool2d}"] + HEAD[1:], p,
                    lambda P, X, S, t, c, s: logits(P, K.conv2d(X["x"], P["conv/kernel"]).amax(dim=(1, 2)))))
    p = {"conv/kernel": w(3, 3, 3, 4), "e/kernel": w(4, 4), "e/bias": w(4, scale=0.5), **head(4)}

    def f_se(P, X, S, t, c, s):
        h = K.conv2d(X["x"], P["conv/kernel"], padding="same")
        g = K.ACTIVATIONS["sigmoid"](K.dense(K.global_avg_pool2d(h), P["e/kernel"], P["e/bias"]))
        return logits(P, K.global_avg_pool2d(K.q(h * g[:, None, None, :])))

    out.append(Case("multiply", "a gate [C] over [H, W, C]",
                    ["{name: conv, type: conv2d, filters: 4, kernel: 3, padding: same, use_bias: false}",
                     "{name: squeeze, type: global_avg_pool2d}", "{name: e, type: dense, units: 4}",
                     "{name: gate, type: sigmoid}", "{name: excited, type: multiply, inputs: [conv, gate]}",
                     "{name: gap, type: global_avg_pool2d}"] + HEAD[1:], p, f_se))

    # --- activations between two dense layers
    for typ, layer in [("relu", "{name: act, type: relu}"), ("relu6", "{name: act, type: relu6}"),
                       ("sigmoid", "{name: act, type: sigmoid}"), ("tanh", "{name: act, type: activation, function: tanh}"),
                       ("silu", "{name: act, type: activation, function: swish}"),
                       ("leaky_relu_layer", "{name: act, type: leaky_relu}"),
                       ("leaky_relu", "{name: act, type: activation, activation: leaky_relu}"),
                       ("elu", "{name: act, type: elu}"), ("elu_0.5", "{name: act, type: elu, alpha: 0.5}"),
                       ("selu", "{name: act, type: activation, function: selu}"),
                       ("softplus", "{name: act, type: activation, function: softplus}"),
                       ("hard_sigmoid", "{name: act, type: activation, function: hard_sigmoid}"),
                       ("hard_silu", "{name: act, type: activation, function: hard_swish}"),
                       ("mish", "{name: act, type: activation, function: mish}"),
                       # Keras's Dense(6, activation="selu"): the key on the dense itself
                       ("selu", None)]:
        p = {"d1/kernel": w(5, 6, scale=2.0), "d1/bias": w(6, scale=1.0), **head(6)}  # scale 2: relu6 clips

        def f(P, X, S, t, c, s, typ=typ):
            return logits(P, K.ACTIVATIONS[typ](K.dense(X["x"], P["d1/kernel"], P["d1/bias"])))

        layers = ["{name: d1, type: dense, units: 6}", layer] if layer else [f"{{name: d1, type: dense, units: 6, activation: {typ}}}"]
        out.append(Case("activation", typ if layer else f"dense activation: {typ}", layers + HEAD[1:], p, f,
                        inputs={"x": ("vector", [5])}))

    # --- merges, padding, flatten
    p = {"a/kernel": w(3, 3, 3, 2), "b/kernel": w(1, 1, 3, 3), **head(6 * 7 * 5)}
    out.append(Case("concat", "two conv branches (channels)",
                    ["{name: a, type: conv2d, filters: 2, kernel: 3, padding: same, use_bias: false, inputs: [x]}",
                     "{name: b, type: conv2d, filters: 3, kernel: 1, use_bias: false, inputs: [x]}",
                     "{name: cat, type: concat, inputs: [a, b]}"] + HEAD, p,
                    lambda P, X, S, t, c, s: logits(P, torch.cat([K.conv2d(X["x"], P["a/kernel"], padding="same"),
                                                                  K.conv2d(X["x"], P["b/kernel"])], dim=3)),
                    inputs={"x": ("image", IMG)}))
    p = {"a/kernel": w(3, 3, 3, 3), "b/kernel": w(1, 1, 3, 3), **head(6 * 7 * 3)}
    out.append(Case("add", "two conv branches",
                    ["{name: a, type: conv2d, filters: 3, kernel: 3, padding: same, use_bias: false, inputs: [x]}",
                     "{name: b, type: conv2d, filters: 3, kernel: 1, use_bias: false, inputs: [x]}",
                     "{name: sum, type: add, inputs: [a, b]}"] + HEAD, p,
                    lambda P, X, S, t, c, s: logits(P, K.q(K.conv2d(X["x"], P["a/kernel"], padding="same")
                                                         + K.conv2d(X["x"], P["b/kernel"]))), inputs={"x": ("image", IMG)}))
    p = {"conv/kernel": w(3, 3, 3, 2), **head(7 * 6 * 2)}
    out.append(Case("zero_pad2d", "[[1, 2], [0, 1]] then 'valid' 3x3",
                    ["{name: pad, type: zero_pad2d, padding: [[1, 2], [0, 1]]}",
                     "{name: conv, type: conv2d, filters: 2, kernel: 3, use_bias: false}"] + HEAD, p,
                    lambda P, X, S, t, c, s: logits(P, K.conv2d(K.zero_pad2d(X["x"], 1, 2, 0, 1), P["conv/kernel"]))))
    p = {"conv/kernel": w(3, 3, 3, 2), **head(6 * 7 * 2)}
    out.append(Case("flatten", "(h, w, c) order", ["{name: conv, type: conv2d, filters: 2, kernel: 3, padding: same, use_bias: false}"]
                    + HEAD, p,
                    lambda P, X, S, t, c, s: K.dense(K.flatten(K.conv2d(X["x"], P["conv/kernel"], padding="same"),
                                                               channels_first=c == "flatten as (c, h, w)"),
                                                     P["logits/kernel"], P["logits/bias"], f32=True),
                    controls=("flatten as (c, h, w)",)))

    # --- dropout: rate 0, and rate 0.5 with trainer's own mask (node 0: the first layer)
    for rate in (0.0, 0.5):
        p = {"d1/kernel": w(6, 5), "d1/bias": w(5, scale=0.1), **head(5)}

        def f(P, X, S, training, c, step, rate=rate):
            x = X["x"]
            if training and rate > 0:
                scale = 1.0 if c == "no 1/(1 - rate) scaling" else 1.0 / (1.0 - rate)
                x = x * K.dropout_mask(x.numel(), SEED, step, 0, rate).reshape(x.shape) * scale
            return logits(P, torch.relu(K.dense(x, P["d1/kernel"], P["d1/bias"])))

        out.append(Case("dropout", f"rate {rate:g}" + (" (trainer's mask)" if rate else ""),
                        [f"{{name: drop, type: dropout, rate: {rate}}}", "{name: d1, type: dense, units: 5}",
                         "{name: relu, type: relu}"] + HEAD[1:], p, f, inputs={"x": ("vector", [6])},
                        controls=("no 1/(1 - rate) scaling",) if rate else ()))

    # --- embedding, LSTM, a shared layer
    p = {"emb/embeddings": w(10, 4), **head(5 * 4)}
    out.append(Case("embedding", "10 x 4 over 5 ids", ["{name: emb, type: embedding, input_dim: 10, output_dim: 4}"] + HEAD, p,
                    lambda P, X, S, t, c, s: logits(P, P["emb/embeddings"][X["x"].long()]), inputs={"x": ("ids", [5])}))
    for seq in (False, True):
        p = {"lstm/kernel": w(3, 16), "lstm/recurrent_kernel": w(4, 16), "lstm/bias": w(16, scale=0.2),
             **head(5 * 4 if seq else 4)}

        def f(P, X, S, t, c, s, seq=seq):
            gates = "icfo" if c == "gates i, c, f, o" else "ifco"
            return logits(P, K.lstm(X["x"], P["lstm/kernel"], P["lstm/recurrent_kernel"], P["lstm/bias"], seq, gates))

        out.append(Case("lstm", "return_sequences" if seq else "last state",
                        [f"{{name: lstm, type: lstm, units: 4, return_sequences: {str(seq).lower()}}}"]
                        + (HEAD if seq else HEAD[1:]), p, f, inputs={"x": ("vector", [5, 3])},
                        controls=() if seq else ("gates i, c, f, o",)))
    p = {"emb/embeddings": w(10, 3), "lstm/kernel": w(3, 8), "lstm/recurrent_kernel": w(2, 8), "lstm/bias": w(8, scale=0.2),
         **head(2)}
    out.append(Case("embedding + lstm", "", ["{name: emb, type: embedding, input_dim: 10, output_dim: 3}",
                                             "{name: lstm, type: lstm, units: 2}"] + HEAD[1:], p,
                    lambda P, X, S, t, c, s: logits(P, K.lstm(P["emb/embeddings"][X["x"].long()], P["lstm/kernel"],
                                                              P["lstm/recurrent_kernel"], P["lstm/bias"], False)),
                    inputs={"x": ("ids", [6])}))
    p = {"enc/kernel": w(5, 3), "enc/bias": w(3, scale=0.1), **head(6)}
    out.append(Case("shared layer", "one dense on two inputs, gradients added",
                    ["{name: enc, type: dense, units: 3, inputs: [a]}", "{name: enc_b, share: enc, inputs: [b]}",
                     "{name: cat, type: concat, inputs: [enc, enc_b]}"] + HEAD[1:], p,
                    lambda P, X, S, t, c, s: logits(P, torch.cat([K.dense(X["a"], P["enc/kernel"], P["enc/bias"]),
                                                                  K.dense(X["b"], P["enc/kernel"], P["enc/bias"])], dim=1)),
                    inputs={"a": ("vector", [5]), "b": ("vector", [5])}))

    # --- transformer layers: gelu (both forms), layer_norm, dense over a sequence's positions
    for approx in (False, True):
        # scale 0.8: pre-activations of about ±2, where the two forms differ most (by up to 1e-3,
        # 5e-4 of the value: within bf16's rounding of it, 2^-8, so the control runs in fp32 only)
        p = {"d1/kernel": w(5, 6, scale=0.8), "d1/bias": w(6, scale=1.0), **head(6)}

        def f(P, X, S, t, c, s, approx=approx):
            return logits(P, K.gelu(K.dense(X["x"], P["d1/kernel"], P["d1/bias"]), approx != (c == "the other form")))

        out.append(Case("gelu", "approximate: true (tanh)" if approx else "exact (erf)",
                        ["{name: d1, type: dense, units: 6}",
                         "{name: act, type: gelu" + (", approximate: true}" if approx else "}")] + HEAD[1:], p, f,
                        inputs={"x": ("vector", [5])}, controls=("the other form",), bf16_blind=("the other form",)))
    p = {"d1/kernel": w(5, 6), "d1/bias": w(6, scale=0.5), "ln/gamma": 1 + w(6, scale=0.2), "ln/beta": w(6, scale=0.2),
         **head(6)}

    def f_ln(P, X, S, t, c, s):
        h = K.dense(X["x"], P["d1/kernel"], P["d1/bias"])
        return logits(P, K.layer_norm(h, P["ln/gamma"], P["ln/beta"], 1e-5 if c == "epsilon as PyTorch's" else 1e-3,
                                      unbiased=c == "the unbiased variance"))

    out.append(Case("layer_norm", "on dense features, Keras defaults",
                    ["{name: d1, type: dense, units: 6}", "{name: ln, type: layer_norm}"] + HEAD[1:], p, f_ln,
                    inputs={"x": ("vector", [5])}, controls=("epsilon as PyTorch's", "the unbiased variance"),
                    # 1e-5 for 1e-3 moves x-hat by 5e-4/variance of itself: below bf16's 2^-8 here
                    bf16_blind=("epsilon as PyTorch's",)))
    p = {"d1/kernel": w(5, 6), "ln/gamma": 1 + w(6, scale=0.2), "d2/kernel": w(6, 4), "d2/bias": w(4, scale=0.1),
         **head(3 * 4)}

    def f_seq(P, X, S, t, c, s):
        h = K.layer_norm(K.dense(X["x"], P["d1/kernel"]), P["ln/gamma"], None)
        return logits(P, K.dense(K.gelu(h), P["d2/kernel"], P["d2/bias"]))

    out.append(Case("layer_norm", "a sequence [3, 5]: no center, gelu, dense per position",
                    ["{name: d1, type: dense, units: 6, use_bias: false}", "{name: ln, type: layer_norm, center: false}",
                     "{name: act, type: gelu}", "{name: d2, type: dense, units: 4}"] + HEAD, p, f_seq,
                    inputs={"x": ("vector", [3, 5])}))

    # --- position_embedding: keras_hub's PositionEmbedding(sequence_length) added to its input
    p = {"d1/kernel": w(5, 6), "pos/embeddings": w(6, 6), **head(4 * 6)}

    def f_pos(P, X, S, t, c, s):
        h = K.dense(X["x"], P["d1/kernel"])
        start = 1 if c == "positions counted from 1" else 0
        return logits(P, torch.tanh(h + P["pos/embeddings"][start:start + h.shape[1]]))

    out.append(Case("position_embedding", "sequence_length 6 on 4 positions",
                    ["{name: d1, type: dense, units: 6, use_bias: false}",
                     "{name: pos, type: position_embedding, sequence_length: 6}", "{name: act, type: tanh}"] + HEAD,
                    p, f_pos, inputs={"x": ("vector", [4, 5])}, controls=("positions counted from 1",)))

    # --- multi_head_attention (self-attention on a sequence [4, 6] from a dense per position)
    for causal, H, Dk, Dv, bias in ((True, 2, 3, 3, True), (False, 3, 2, 4, False)):
        p = {"d1/kernel": w(5, 6), "attn/query/kernel": w(6, H, Dk), "attn/key/kernel": w(6, H, Dk),
             "attn/value/kernel": w(6, H, Dv), "attn/attention_output/kernel": w(H, Dv, 6)}
        if bias:
            p.update({"attn/query/bias": w(H, Dk, scale=0.1), "attn/key/bias": w(H, Dk, scale=0.1),
                      "attn/value/bias": w(H, Dv, scale=0.1), "attn/attention_output/bias": w(6, scale=0.1)})
        p.update(head(4 * 6))

        def f_attn(P, X, S, t, c, s, causal=causal):
            h = K.dense(X["x"], P["d1/kernel"])
            return logits(P, K.multi_head_attention(h, h, P, "attn", causal, scaled=c != "scores not scaled",
                                                    masked=c != "no causal mask"))

        out.append(Case("multi_head_attention", f"{H} heads, key_dim {Dk}, value_dim {Dv}"
                        + (", causal" if causal else "") + ("" if bias else ", no bias"),
                        ["{name: d1, type: dense, units: 6, use_bias: false}",
                         f"{{name: attn, type: multi_head_attention, num_heads: {H}, key_dim: {Dk}, value_dim: {Dv}, "
                         f"causal: {str(causal).lower()}, use_bias: {str(bias).lower()}}}"] + HEAD, p, f_attn,
                        inputs={"x": ("vector", [4, 5])},
                        controls=("scores not scaled",) + (("no causal mask",) if causal else ())))

    # --- a two-block GPT: token embedding, positions, two pre-norm blocks (layer norm, causal self-
    # attention, residual; layer norm, GELU MLP, residual), layer norm, next-token scores at every
    # position, the loss the mean over every position (labels [N, T]); and with the head tied to the
    # token embedding (GPT-2's, keras_hub's ReversibleEmbedding: scores = h · tableᵀ, no bias).
    T, D, V = 4, 6, 10
    for tied in (False, True):
        p = {"tok/embeddings": w(V, D), "pos/embeddings": w(T, D, scale=0.2), "ln/gamma": 1 + w(D, scale=0.2),
             "ln/beta": w(D, scale=0.1)}
        if not tied:
            p.update({"head/kernel": w(D, CLASSES), "head/bias": w(CLASSES, scale=0.1)})
        layers = [f"{{name: tok, type: embedding, input_dim: {CLASSES if tied else V}, output_dim: 6}}",
                  "{name: pos, type: position_embedding}"]
        if tied:
            p["tok/embeddings"] = w(CLASSES, D)
        prev = "pos"
        for b in ("b1", "b2"):
            p.update({f"{b}_ln1/gamma": 1 + w(D, scale=0.2), f"{b}_ln1/beta": w(D, scale=0.1),
                      f"{b}_attn/query/kernel": w(D, 2, 3), f"{b}_attn/key/kernel": w(D, 2, 3),
                      f"{b}_attn/value/kernel": w(D, 2, 3), f"{b}_attn/attention_output/kernel": w(2, 3, D),
                      f"{b}_attn/query/bias": w(2, 3, scale=0.1), f"{b}_attn/key/bias": w(2, 3, scale=0.1),
                      f"{b}_attn/value/bias": w(2, 3, scale=0.1), f"{b}_attn/attention_output/bias": w(D, scale=0.1),
                      f"{b}_ln2/gamma": 1 + w(D, scale=0.2), f"{b}_ln2/beta": w(D, scale=0.1),
                      f"{b}_up/kernel": w(D, 8), f"{b}_up/bias": w(8, scale=0.1),
                      f"{b}_down/kernel": w(8, D), f"{b}_down/bias": w(D, scale=0.1)})
            layers += [f"{{name: {b}_ln1, type: layer_norm, inputs: [{prev}]}}",
                       f"{{name: {b}_attn, type: multi_head_attention, num_heads: 2, key_dim: 3, causal: true}}",
                       f"{{name: {b}_res1, type: add, inputs: [{prev}, {b}_attn]}}", f"{{name: {b}_ln2, type: layer_norm}}",
                       f"{{name: {b}_up, type: dense, units: 8}}", f"{{name: {b}_gelu, type: gelu}}",
                       f"{{name: {b}_down, type: dense, units: 6}}",
                       f"{{name: {b}_res2, type: add, inputs: [{b}_res1, {b}_down]}}"]
            prev = f"{b}_res2"
        layers += ["{name: ln, type: layer_norm}",
                   f"{{name: head, type: dense, units: {CLASSES}" + (", tie: tok, use_bias: false}" if tied else "}"),
                   "{name: out, type: softmax}"]

        def f_gpt(P, X, S, t, c, s, tied=tied):
            h = P["tok/embeddings"][X["x"].long()] + P["pos/embeddings"]
            for b in ("b1", "b2"):
                a = K.layer_norm(h, P[f"{b}_ln1/gamma"], P[f"{b}_ln1/beta"])
                h = h + K.multi_head_attention(a, a, P, f"{b}_attn", causal=True, masked=c != "no causal mask")
                m = K.layer_norm(h, P[f"{b}_ln2/gamma"], P[f"{b}_ln2/beta"])
                h = h + K.dense(K.gelu(K.dense(m, P[f"{b}_up/kernel"], P[f"{b}_up/bias"])), P[f"{b}_down/kernel"],
                                P[f"{b}_down/bias"])
            h = K.layer_norm(h, P["ln/gamma"], P["ln/beta"])
            if not tied:
                return K.dense(h, P["head/kernel"], P["head/bias"], f32=True)
            # The control: the table's gradient from its lookup alone (the head's use detached).
            table = P["tok/embeddings"].detach() if c == "tied head's gradient dropped" else P["tok/embeddings"]
            return K.dense(h, table.t(), f32=True)

        out.append(Case("gpt", f"two blocks, {T} positions, a label per position" + (", head tied to the embedding" if tied else ""),
                        layers, p, f_gpt, inputs={"x": ("ids", [T], CLASSES if tied else V)}, positions=T,
                        controls=("no causal mask", "positions summed, not averaged")
                        + (("tied head's gradient dropped",) if tied else ()),
                        # In bf16 the head's share of the table's update (relative L2) is within the
                        # bound once the attention rounds q, k, v and o as trainer does (0.59 of it,
                        # 2026-12-01): the fp32 pass checks it (5.8 relative off).
                        bf16_blind=("tied head's gradient dropped",) if tied else ()))
        if not tied:  # padded sequences: labels -100 (PyTorch's ignore_index) after each sample's length
            out.append(Case("gpt", f"two blocks, {T} positions, pad labels -100 (ignore_class)", layers, p, f_gpt,
                            inputs={"x": ("ids", [T], V)}, positions=T, ignore=-100,
                            controls=("no causal mask", "pads counted in the mean")))

    # --- losses
    for loss, ls in [("categorical_crossentropy", 0.0), ("sparse_categorical_crossentropy", 0.1),
                     ("categorical_crossentropy", 0.2)]:
        p = {"d1/kernel": w(5, CLASSES), "d1/bias": w(CLASSES, scale=0.1)}
        out.append(Case("loss", loss + (f", label_smoothing {ls:g}" if ls else ""),
                        [f"{{name: d1, type: dense, units: {CLASSES}}}", "{name: out, type: softmax}"], p,
                        lambda P, X, S, t, c, s: K.dense(X["x"], P["d1/kernel"], P["d1/bias"], f32=True),
                        inputs={"x": ("vector", [5])}, loss=loss, smoothing=ls))
    for ls in (0.0, 0.1):
        p = {"d1/kernel": w(5, 1), "d1/bias": w(1, scale=0.1)}
        out.append(Case("loss", "binary_crossentropy" + (f", label_smoothing {ls:g}" if ls else ""),
                        ["{name: d1, type: dense, units: 1}", "{name: out, type: sigmoid}"], p,
                        lambda P, X, S, t, c, s: K.dense(X["x"], P["d1/kernel"], P["d1/bias"], f32=True),
                        inputs={"x": ("vector", [5])}, loss="binary_crossentropy", smoothing=ls))
    from layer_cases_later import later_cases  # here: it imports this module's helpers
    out += later_cases(len(out))
    return out
