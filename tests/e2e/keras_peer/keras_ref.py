"""Keras 3's layers, losses and trainer's dropout mask, written by hand in PyTorch (float64, NHWC).

Every function takes and returns channels-last tensors and Keras-layout weights, as Keras stores
them (and trainer's checkpoints do). Where PyTorch's own operator means something else, the comment
says what, citing Keras 3 (keras/src/...) or TensorFlow, whose kernels the Keras TF backend uses.
"""
import math
import sys

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001 - any import failure is a skip (exit 77: the C++ test says so)
    print(f"SKIPPED (package): /usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch): {e}")
    sys.exit(77)

torch.set_default_dtype(torch.float64)  # the references compute in float64


# --- bf16's rounding as a perturbation model (the peer suite's bf16 bounds, layers.py). Under
# `precision: bf16` trainer stores each activation and activation gradient in bf16 and converts the
# f32 weights (and its inputs) to bf16 where a convolution or a dense layer multiplies: each such
# value is its float64 value times (1 + e) with |e| <= 2^-8, bf16's unit roundoff. With rounding(g)
# set, every function below perturbs exactly there by an e drawn uniformly from that range by the
# generator g (forward: the stored value; backward: the gradient through it, rounded once more
# where it is stored), so that a few such runs show how far bf16's roundings can move each tensor's
# update; rounding(None) turns it off (exact float64).
BF16_U = 2.0 ** -8
_round = None


def rounding(gen):
    global _round
    _round = gen


def _e(t):
    return (torch.rand(t.shape, generator=_round, dtype=torch.float64) * 2 - 1) * BF16_U


class _Stored(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, e_fwd, e_bwd):
        ctx.save_for_backward(e_fwd, e_bwd)
        return x * (1 + e_fwd)

    @staticmethod
    def backward(ctx, g):
        e_fwd, e_bwd = ctx.saved_tensors
        return g * (1 + e_fwd) * (1 + e_bwd), None, None


def q(x):
    """An activation stored in bf16 (and its gradient, stored in bf16 too), under rounding()."""
    if _round is None or not torch.is_floating_point(x):
        return x
    return _Stored.apply(x, _e(x), _e(x))


def qw(w):
    """A weight (f32) converted to bf16 where it is multiplied, under rounding()."""
    if _round is None:
        return w
    return w * (1 + _e(w))


def same_pads(n, k, s, d=1):
    # TensorFlow's 'same' (tf.nn.conv2d, tf.nn.pool; keras/src/backend/tensorflow/nn.py passes the
    # padding string through): out = ceil(n / s), total = max((out - 1)·s + (k - 1)·d + 1 - n, 0),
    # the smaller half BEFORE (total // 2) and the rest after. PyTorch's padding=k//2 is symmetric:
    # for stride 2 on an even size it pads one more row on top than TensorFlow does.
    out = -(-n // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
    return total // 2, total - total // 2


def _pad_same(x, kh, kw, sh, sw, dh=1, dw=1, value=0.0, symmetric=False):
    t, b = same_pads(x.shape[1], kh, sh, dh)
    l, r = same_pads(x.shape[2], kw, sw, dw)
    if symmetric:  # negative control: PyTorch's padding=k//2 on both sides
        t = b = (kh - 1) * dh // 2
        l = r = (kw - 1) * dw // 2
    return F.pad(x, (0, 0, l, r, t, b), value=value)


def conv2d(x, kernel, bias=None, strides=(1, 1), padding="valid", dilation=(1, 1), symmetric=False, raw_layout=False):
    # keras.layers.Conv2D: kernel [kh, kw, in, out] (PyTorch's weight is [out, in, kh, kw]), NHWC.
    kh, kw, cin, cout = kernel.shape
    if padding == "same":
        x = _pad_same(x, kh, kw, strides[0], strides[1], dilation[0], dilation[1], symmetric=symmetric)
    kernel = qw(kernel)
    w = kernel.reshape(cout, cin, kh, kw) if raw_layout else kernel.permute(3, 2, 0, 1)  # raw: a control
    y = F.conv2d(q(x).permute(0, 3, 1, 2), w, bias, stride=strides, dilation=dilation)
    return q(y.permute(0, 2, 3, 1))


def conv1d(x, kernel, bias=None, stride=1, padding="valid", dilation=1):
    # keras.layers.Conv1D on [N, steps, C]: kernel [k, in, out] (PyTorch's weight [out, in, k]);
    # 'same' pads as TensorFlow (the smaller half before); 'causal' pads (k - 1)·dilation before.
    k, cin, cout = kernel.shape
    eff = (k - 1) * dilation + 1
    n = x.shape[1]
    if padding == "same":
        out = -(-n // stride)
        total = max((out - 1) * stride + eff - n, 0)
        x = F.pad(x, (0, 0, total // 2, total - total // 2))
    elif padding == "causal":
        x = F.pad(x, (0, 0, eff - 1, 0))
    y = F.conv1d(q(x).permute(0, 2, 1), qw(kernel).permute(2, 1, 0), bias, stride=stride, dilation=dilation)
    return q(y.permute(0, 2, 1))


def depthwise_conv2d(x, kernel, bias=None, strides=(1, 1), padding="valid", dilation=(1, 1)):
    # keras.layers.DepthwiseConv2D: kernel [kh, kw, C, M]; output channel c·M + m is input channel c
    # through its m-th filter (tf.nn.depthwise_conv2d), i.e. groups=C with weight [C·M, 1, kh, kw].
    kh, kw, c, m = kernel.shape
    if padding == "same":
        x = _pad_same(x, kh, kw, strides[0], strides[1], dilation[0], dilation[1])
    w = qw(kernel).permute(2, 3, 0, 1).reshape(c * m, 1, kh, kw)
    y = F.conv2d(q(x).permute(0, 3, 1, 2), w, bias, stride=strides, dilation=dilation, groups=c)
    return q(y.permute(0, 2, 3, 1))


def conv_transpose_length(n, k, s, d, padding, output_padding):
    # keras/src/ops/operation_utils.py compute_conv_transpose_output_shape -> deconv_output_length.
    eff = (k - 1) * d + 1
    if output_padding is None:
        return n * s if padding == "same" else n * s + max(eff - s, 0)
    return (n - 1) * s + eff - 2 * (eff // 2 if padding == "same" else 0) + output_padding


def conv2d_transpose(x, kernel, bias=None, strides=(1, 1), padding="valid", output_padding=(None, None),
                     dilation=(1, 1)):
    # keras.layers.Conv2DTranspose: kernel [kh, kw, out, in] (PyTorch's ConvTranspose2d weight is
    # [in, out, kh, kw]). TensorFlow's conv2d_transpose is the input gradient of the convolution from
    # the output (Keras's length) back to x with the same padding: PyTorch's unpadded transposed
    # convolution, [(n - 1)·s + eff] long, cropped by that convolution's 'same' padding before (the
    # smaller half), and cut or extended with zero rows (no window reaches them) to the length.
    # Under rounding(), the bias is added to the stored output and stored again (trainer's order).
    kh, kw, cout, cin = kernel.shape
    y = F.conv_transpose2d(q(x).permute(0, 3, 1, 2), qw(kernel).permute(3, 2, 0, 1), stride=strides, dilation=dilation)
    for axis, (k, s, d, op) in enumerate([(kh, strides[0], dilation[0], output_padding[0]),
                                          (kw, strides[1], dilation[1], output_padding[1])]):
        n = x.shape[1 + axis]
        out = conv_transpose_length(n, k, s, d, padding, op)
        before = same_pads(out, k, s, d)[0] if padding == "same" else 0
        y = y.narrow(2 + axis, before, min(out, y.shape[2 + axis] - before))
        if y.shape[2 + axis] < out:
            pad = [0, 0, 0, 0]
            pad[(1 - axis) * 2 + 1] = out - y.shape[2 + axis]
            y = F.pad(y, pad)
    y = q(y.permute(0, 2, 3, 1))
    return y if bias is None else q(y + bias)


def max_pool2d(x, pool, strides, padding="valid"):
    # keras.layers.MaxPooling2D: 'same' pads as TensorFlow (padding never wins a maximum).
    if padding == "same":
        x = _pad_same(x, pool[0], pool[1], strides[0], strides[1], value=-math.inf)
    return q(F.max_pool2d(x.permute(0, 3, 1, 2), pool, strides).permute(0, 2, 3, 1))


def avg_pool2d(x, pool, strides, padding="valid", count_padding=False):
    # keras.layers.AveragePooling2D: 'same' averages over the window's real elements only
    # (tf.nn.avg_pool; PyTorch's avg_pool2d counts the padding unless count_include_pad=False).
    ones = torch.ones_like(x[..., :1])
    if padding == "same":
        x = _pad_same(x, pool[0], pool[1], strides[0], strides[1])
        ones = _pad_same(ones, pool[0], pool[1], strides[0], strides[1], value=1.0 if count_padding else 0.0)
    s = F.avg_pool2d(x.permute(0, 3, 1, 2), pool, strides, divisor_override=1)
    n = F.avg_pool2d(ones.permute(0, 3, 1, 2), pool, strides, divisor_override=1)
    return q((s / n).permute(0, 2, 3, 1))


def global_avg_pool2d(x):
    return q(x.mean(dim=(1, 2)))


def zero_pad2d(x, top, bottom, left, right):
    return F.pad(x, (0, 0, left, right, top, bottom))


def flatten(x, channels_first=False):
    # keras.layers.Flatten on channels-last data: the order (h, w, c). A PyTorch model flattens
    # (c, h, w): the negative control.
    if channels_first and x.dim() == 4:
        x = x.permute(0, 3, 1, 2)
    return x.reshape(x.shape[0], -1)


def dense(x, kernel, bias=None, f32=False):
    # keras.layers.Dense: kernel [in, out] (PyTorch's Linear weight is [out, in]). Under bf16
    # trainer multiplies bf16 operands (x stored or converted in bf16, the f32 kernel converted
    # where it multiplies) and stores y (and its gradient) in bf16, but for the logits (f32 = True:
    # the layer before the loss, or the model's output, which trainer keeps f32).
    y = q(x) @ qw(kernel)
    y = y + bias if bias is not None else y
    return y if f32 else q(y)


def batchnorm_train(x, gamma, beta, state, momentum, epsilon, unbiased=False, flipped_momentum=False):
    """keras.layers.BatchNormalization in training. Returns y; updates state's moving statistics.

    keras/src/layers/normalization/batch_normalization.py: mean, variance = ops.moments(x) (the
    biased variance, mean((x - mean)^2)); moving_mean = moving_mean·momentum + mean·(1 - momentum),
    moving_variance = moving_variance·momentum + variance·(1 - momentum). PyTorch's BatchNorm2d
    feeds the unbiased variance into running_var and its `momentum` is Keras's 1 - momentum.
    """
    axes = tuple(range(x.dim() - 1))
    mean = x.mean(dim=axes)
    var = ((x - mean) ** 2).mean(dim=axes)
    y = q((x - mean) / torch.sqrt(var + epsilon) * gamma + beta)
    m = x.numel() // x.shape[-1]
    v = var.detach() * (m / (m - 1) if unbiased and m > 1 else 1.0)
    k = 1.0 - momentum if flipped_momentum else momentum
    state["moving_mean"] = state["moving_mean"] * k + mean.detach() * (1.0 - k)
    state["moving_variance"] = state["moving_variance"] * k + v * (1.0 - k)
    return y


def batchnorm_infer(x, gamma, beta, state, epsilon):
    return q((x - state["moving_mean"]) / torch.sqrt(state["moving_variance"] + epsilon) * gamma + beta)


def lstm(x, kernel, recurrent, bias, return_sequences, gates="ifco"):
    """keras.layers.LSTM (activation tanh, recurrent_activation sigmoid, the Keras 3 defaults).

    Gates in the order i, f, c, o along the 4·units axis (keras/src/layers/rnn/lstm.py, LSTMCell:
    z = x·kernel + h·recurrent_kernel + bias; c = f·c + i·tanh(z_c); h = o·tanh(c)); the initial
    state zero. PyTorch's nn.LSTM orders i, f, g, o too, but stores weight_ih [4u, in].
    """
    n, t, _ = x.shape
    u = recurrent.shape[0]
    h = x.new_zeros(n, u)
    c = x.new_zeros(n, u)
    out = []
    for s in range(t):
        z = x[:, s] @ kernel + h @ recurrent
        if bias is not None:
            z = z + bias
        part = {k: z[:, j * u : (j + 1) * u] for j, k in enumerate(gates)}  # gates="icfo": a control
        i, f, g, o = part["i"], part["f"], part["c"], part["o"]
        i, f, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)
        c = f * c + i * torch.tanh(g)
        h = o * torch.tanh(c)
        out.append(h)
    return torch.stack(out, dim=1) if return_sequences else h


def gru(x, kernel, recurrent, bias, return_sequences, reset_after=True):
    """keras.layers.GRU (activation tanh, recurrent_activation sigmoid, reset_after=True: the Keras 3
    defaults). Gates z, r, h along the 3·units axis (keras/src/layers/rnn/gru.py, GRUCell): the input
    projection x·kernel + bias[0] and the recurrent one h·recurrent_kernel + bias[1]; the reset gate
    multiplies the recurrent h projection (reset_after), hh = tanh(x_h + r·m_h);
    h = z·h + (1 - z)·hh; the initial state zero. reset_after=False (r applied to h before its
    projection, Keras 1's form): a control. PyTorch's nn.GRU orders r, z, n and computes
    h = (1 - z)·n + z·h."""
    n, t, _ = x.shape
    u = recurrent.shape[0]
    h = x.new_zeros(n, u)
    out = []
    for s in range(t):
        a = x[:, s] @ kernel + (bias[0] if bias is not None else 0)
        m = h @ recurrent + (bias[1] if bias is not None else 0)
        z = torch.sigmoid(a[:, :u] + m[:, :u])
        r = torch.sigmoid(a[:, u:2 * u] + m[:, u:2 * u])
        if reset_after:
            hh = torch.tanh(a[:, 2 * u:] + r * m[:, 2 * u:])
        else:
            hh = torch.tanh(a[:, 2 * u:] + (r * h) @ recurrent[:, 2 * u:] + (bias[1][2 * u:] if bias is not None else 0))
        h = z * h + (1 - z) * hh
        out.append(h)
    return torch.stack(out, dim=1) if return_sequences else h


def bidirectional(x, forward, backward, merge_mode, return_sequences, control=None):
    """keras.layers.Bidirectional(layer, merge_mode) (keras/src/layers/rnn/bidirectional.py): `forward`
    runs over x, `backward` (the layer's copy with weights of its own, go_backwards=True) over x's steps
    reversed, and its output sequence is reversed back (return_sequences) so that step t of both halves
    belongs to x's step t; the last-state form takes each half's last step. The halves merged: concat
    (forward first, last axis), sum, ave ((a + b) / 2) or mul. `control`: "backward sequence not
    reversed back" or "backward half over the steps in order"."""
    y = forward(x)
    yb = backward(x if control == "backward half over the steps in order" else torch.flip(x, dims=[1]))
    if return_sequences and control != "backward sequence not reversed back":
        yb = torch.flip(yb, dims=[1])
    if merge_mode == "concat":
        return torch.cat([y, yb], dim=-1)
    if merge_mode == "sum":
        return y + yb
    if merge_mode == "ave":
        return (y + yb) / 2
    return y * yb


def layer_norm(x, gamma, beta, epsilon=1e-3, unbiased=False):
    """keras.layers.LayerNormalization (axis -1): mean and variance over the last axis (ops.moments:
    the biased variance), (x - mean) / sqrt(variance + epsilon) · gamma + beta; gamma / beta None
    without scale / center. PyTorch's nn.LayerNorm is the same with eps 1e-5. In float32 under bf16
    (trainer converts a bf16 input first): no rounding here. `unbiased`: a control."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    if unbiased:
        var = var * (x.shape[-1] / (x.shape[-1] - 1))
    y = (x - mean) / torch.sqrt(var + epsilon)
    if gamma is not None:
        y = y * gamma
    return y + beta if beta is not None else y


def multi_head_attention(q_in, kv_in, P, name, causal=False, scaled=True, masked=True, f32=False):
    """keras.layers.MultiHeadAttention(num_heads, key_dim, value_dim) called as (query, value): EinsumDense
    projections with kernels [d, H, D] and biases [H, D] (absent without use_bias), the query
    scaled by 1/sqrt(key_dim), scores einsum("aecd,abcd->acbe", key, query) [B, H, T, S], softmax
    over the keys (use_causal_mask: the lower triangle of [T, S]), einsum("acbe,aecd->abcd") with
    the value, and the output projection [H, Dv, d_out] + bias. `scaled`/`masked` False: controls.
    Under bf16 trainer computes it as dense layers around the attention: its inputs, the projected
    q, k, v, the attention's output and y stored in bf16 (y in f32 as the logits, f32 = True), the
    kernels converted where they multiply; the scores, their scale and the softmax in f32, the
    probabilities (and their gradient) rounded to bf16 where they multiply v (the CPU's attn_bf16
    dot products, cuDNN's fused attention on a GPU)."""
    def proj(x, which):
        y = torch.einsum("btd,dhk->bthk", x, qw(P[f"{name}/{which}/kernel"]))
        bias = P.get(f"{name}/{which}/bias")
        return q(y + bias if bias is not None else y)
    xq = q(q_in)  # each input converted once (self-attention: one input)
    xkv = xq if kv_in is q_in else q(kv_in)
    qh, k, v = proj(xq, "query"), proj(xkv, "key"), proj(xkv, "value")
    scores = torch.einsum("aecd,abcd->acbe", k, qh)
    if scaled:
        scores = scores / math.sqrt(qh.shape[-1])
    if causal and masked:
        T, S = scores.shape[-2], scores.shape[-1]
        keep = torch.tril(torch.ones(T, S, dtype=torch.bool))
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = q(torch.softmax(scores, dim=-1))  # rounded to bf16 where they multiply v (attn_bf16, cuDNN)
    ctx = q(torch.einsum("acbe,aecd->abcd", probs, v))
    y = torch.einsum("abcd,cde->abe", ctx, qw(P[f"{name}/attention_output/kernel"]))
    bias = P.get(f"{name}/attention_output/bias")
    y = y + bias if bias is not None else y
    return y if f32 else q(y)


def gelu(v, approximate=False):
    """keras.activations.gelu: x·Φ(x) = x/2·(1 + erf(x/√2)); approximate: x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    if approximate:
        return q(0.5 * v * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3))))
    return q(0.5 * v * (1.0 + torch.erf(v / math.sqrt(2.0))))


ACTIVATIONS = {  # relu and relu6 of a bf16 value are bf16 values: no rounding
    "relu": torch.relu,
    "relu6": lambda v: torch.clamp(v, 0.0, 6.0),  # keras.layers.ReLU(max_value=6)
    "sigmoid": lambda v: q(torch.sigmoid(v)),
    "tanh": lambda v: q(torch.tanh(v)),
    "silu": lambda v: q(v * torch.sigmoid(v)),  # keras.activations.silu (swish): x·sigmoid(x)
    # keras.activations (Keras 3) written out; the layers' defaults differ from the functions'.
    "leaky_relu": lambda v: q(torch.where(v > 0, v, 0.2 * v)),  # leaky_relu(x, negative_slope=0.2)
    "leaky_relu_layer": lambda v: q(torch.where(v > 0, v, 0.3 * v)),  # keras.layers.LeakyReLU() (0.3)
    "elu": lambda v: q(torch.where(v > 0, v, torch.expm1(torch.clamp(v, max=0.0)))),  # elu(x, alpha=1.0)
    "elu_0.5": lambda v: q(torch.where(v > 0, v, 0.5 * torch.expm1(torch.clamp(v, max=0.0)))),  # ELU(alpha=0.5)
    "selu": lambda v: q(1.05070098 * torch.where(v > 0, v, 1.67326324 * torch.expm1(torch.clamp(v, max=0.0)))),
    "softplus": lambda v: q(torch.log1p(torch.exp(v))),  # log(1 + e^x) (inputs here are small)
    "hard_sigmoid": lambda v: q(torch.clamp(v + 3.0, 0.0, 6.0) / 6.0),  # Keras 3: relu6(x + 3) / 6
    "hard_silu": lambda v: q(v * (torch.clamp(v + 3.0, 0.0, 6.0) / 6.0)),  # x·hard_sigmoid(x) (hard_swish)
    "mish": lambda v: q(v * torch.tanh(torch.log1p(torch.exp(v)))),  # x·tanh(softplus(x))
    "linear": lambda v: v,
}


# --- Losses (keras/src/losses/losses.py): the batch mean of the per-sample loss.
def sparse_categorical_crossentropy(logits, y, k, smoothing=0.0, ignore_class=None):
    # Keras's label_smoothing: targets y·(1 - ls) + ls/K (categorical_crossentropy; the sparse form
    # applies it to the one-hot labels). Keras's ignore_class: the rows of that label score 0 and are
    # masked out of the mean (sum_over_batch_size divides by the rows kept), PyTorch's ignore_index.
    if ignore_class is not None:
        keep = y != ignore_class
        logits, y = logits[keep], y[keep]
    t = F.one_hot(y, k).to(logits.dtype) * (1.0 - smoothing) + smoothing / k
    return -(t * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


def binary_crossentropy(logit, y, smoothing=0.0):
    # keras.losses.binary_crossentropy on a sigmoid output: targets y·(1 - ls) + ls/2.
    t = y.to(logit.dtype) * (1.0 - smoothing) + smoothing / 2
    return F.binary_cross_entropy_with_logits(logit.reshape(-1), t)


# --- trainer's dropout mask (core/ops/math/philox.h, core/ops/step_scalars.h, core/run/epoch_loop.cpp):
# the RNG is the one part that cannot be Keras's; given the mask, Keras's inverted dropout
# (keras/src/layers/regularization/dropout.py: x·mask / (1 - rate)) is what the reference applies.
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def _philox(c0, c1, c2, c3, k0, k1):
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def _node_seed(run_seed, global_step, node, rank=0):
    step = (((run_seed * 0x9E3779B97F4A7C15 + global_step) & M64) * 0xBF58476D1CE4E5B9 + rank) & M64
    return (step * 1000003 + node) & M64


def dropout_mask(numel, run_seed, global_step, node, rate, rank=0):
    seed = _node_seed(run_seed, global_step, node, rank)
    t = rate * 16777216.0
    threshold = int(t) + (1 if int(t) < t else 0)
    keep = []
    for g in range((numel + 3) // 4):
        w = _philox(g & M32, g >> 32, 0, 0, seed & M32, seed >> 32)
        keep += [(w[j] >> 8) >= threshold for j in range(4)]
    return torch.tensor(keep[:numel], dtype=torch.float64)


def gaussian_normal(numel, run_seed, global_step, node, rank=0):
    """The standard normal values trainer's gaussian_noise / gaussian_dropout draw for a node's tensor of
    `numel` elements (core/ops/math/gaussian_noise.h): element i takes the words of Philox group i // 4, the
    pair (w0, w1) for elements 4g and 4g + 1 and (w2, w3) for the others, by Box–Muller: u1 = ((w_even >> 8)
    + 1) / 2^24, u2 = (w_odd >> 8) / 2^24, sqrt(-2 ln u1)·cos(2π u2) (even) or ·sin (odd)."""
    seed = _node_seed(run_seed, global_step, node, rank)
    z = []
    for g in range((numel + 3) // 4):
        w = _philox(g & M32, g >> 32, 0, 0, seed & M32, seed >> 32)
        for a, b in ((w[0], w[1]), (w[2], w[3])):
            u1, u2 = ((a >> 8) + 1) / 16777216.0, (b >> 8) / 16777216.0
            r, th = math.sqrt(-2.0 * math.log(u1)), 2.0 * math.pi * u2
            z += [r * math.cos(th), r * math.sin(th)]
    return torch.tensor(z[:numel], dtype=torch.float64)
