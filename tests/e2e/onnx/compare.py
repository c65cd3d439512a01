#!/usr/bin/python3
"""Checks an ONNX model that `trainer export` wrote with implementations nobody here wrote: ONNX's
own checker (full check) and strict shape inference (python3-onnx), then runs it with OpenCV's DNN
module (python3-opencv) on the inputs `trainer predict` was given and compares the probabilities.

  compare.py MODEL.onnx INPUTS.npy EXPECTED.npy [--raw] [--stats RUN/norm_stats.npy]
             [--mean M] [--scale S] [--tolerance 1e-4] [--allow-opencv-refusal]

INPUTS.npy: uint8 pixels [N, H, W, C] (RGB) for an image model, or float32 [N, elements] holding
the model's inputs one after another for any other model (as `trainer predict` takes them).
EXPECTED.npy: float32 [N, K], `trainer predict --probs`. --raw: the model takes raw pixels
(exported with --normalize); otherwise this script normalises them as training did: (pixel -
mean) * multiplier from norm_stats.npy (per_pixel (H, W, C) or per_channel (2, C)) or --mean,
then * --scale. Prints one JSON line: {"max_abs_diff": ..., "opencv": "ok" | "refused: ..."}.
Exit 0 when every check passes; 1 otherwise.
"""
import argparse
import json
import sys

import cv2
import numpy as np
import onnx
import onnx.checker
import onnx.helper
import onnx.numpy_helper
import onnx.shape_inference


def dims(value_info):
    return [d.dim_param if d.dim_param else d.dim_value for d in value_info.type.tensor_type.shape.dim]


def normalise(pixels, stats, mean, scale):
    """The trainer's loader: (pixel - sub) * mul, mul = scale * (1 / std) in float32 (NHWC)."""
    x = pixels.astype(np.float32)
    mul = np.float32(scale)
    if stats is not None:
        s = np.load(stats).astype(np.float32)
        if s.ndim == 3:  # per_pixel: the mean image
            x = x - s[None]
        else:  # per_channel: means, standard deviations
            x = x - s[0]
            mul = np.float32(scale) * (np.float32(1.0) / s[1])
    elif mean is not None:
        x = x - np.float32(mean)
    return (x * mul).astype(np.float32)


def check_conv_groups(model):
    """Each Conv's input channels are its weight's second dimension times its group. ONNX's shape
    inference does not check it, and OpenCV infers the group from the weights and runs such a model
    anyway (ONNX Runtime refuses it): checked here on the inferred shapes."""
    shapes = {v.name: dims(v) for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type != "Conv":
            continue
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        x, w = shapes.get(n.input[0]), weights.get(n.input[1])
        assert x is not None and w is not None, f"Conv {n.name}: input or weight shape unknown"
        assert x[1] == w[1] * group, f"Conv {n.name}: {x[1]} input channels, weights {w} with group {group}"


def opencv_feedable(model, path, feeds):
    """OpenCV 4.6's Python binding turns a 3-D array [N, T, F] (F <= 512) into a 2-D Mat with F
    channels, so a sequence input never reaches the network as 3-D. For such inputs the model is
    wrapped: a new input [N, T*F] and a Reshape to [N, T, F] (N fixed to this batch, in both: OpenCV
    4.6's LSTM importer needs the batch known, and with a symbolic N in the input it fails on the
    attention's Reshape/Transpose of heads) in front of the exported graph, which is left as it is."""
    if all(v.ndim != 3 for v in feeds.values()):
        return path, feeds
    wrapped = onnx.ModelProto()
    wrapped.CopyFrom(model)
    g = wrapped.graph
    pre, out_feeds = [], {}
    for i in g.input:
        blob = feeds[i.name]
        if blob.ndim != 3:
            out_feeds[i.name] = blob
            continue
        flat = i.name + "__flat"
        shape = i.name + "__shape"
        g.initializer.append(onnx.numpy_helper.from_array(np.array(blob.shape, dtype=np.int64), shape))
        pre.append(onnx.helper.make_node("Reshape", [flat, shape], [i.name]))
        out_feeds[flat] = np.ascontiguousarray(blob.reshape(blob.shape[0], -1))
    inputs = []
    for i in g.input:
        if feeds[i.name].ndim == 3:
            inputs.append(onnx.helper.make_tensor_value_info(i.name + "__flat", onnx.TensorProto.FLOAT,
                                                             [feeds[i.name].shape[0], int(np.prod(feeds[i.name].shape[1:]))]))
        else:
            inputs.append(i)
    del g.input[:]
    g.input.extend(inputs)
    # OpenCV 4.6 reads a GRU only with all six inputs and initial_h a constant of the batch (the
    # export leaves the optional initial_h out: zeros, per ONNX): a zero constant of this batch.
    batch = next(iter(feeds.values())).shape[0]
    for n in g.node:
        if n.op_type == "GRU" and (len(n.input) < 6 or not n.input[5]):
            hidden = next(a.i for a in n.attribute if a.name == "hidden_size")
            h0 = n.output[0] + "__initial_h"
            g.initializer.append(onnx.numpy_helper.from_array(np.zeros((1, batch, hidden), np.float32), h0))
            while len(n.input) < 5:
                n.input.append("")
            n.input.append(h0) if len(n.input) == 5 else n.input.__setitem__(5, h0)
    nodes = pre + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(wrapped, full_check=True)
    out = path[:-len(".onnx")] + ".opencv.onnx" if path.endswith(".onnx") else path + ".opencv.onnx"
    onnx.save(wrapped, out)
    return out, out_feeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("expected")
    ap.add_argument("--raw", action="store_true")
    ap.add_argument("--stats")
    ap.add_argument("--mean", type=float)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--allow-opencv-refusal", action="store_true")
    a = ap.parse_args()
    result = {"model": a.model}

    model = onnx.load(a.model)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    onnx.checker.check_model(inferred, full_check=True)
    check_conv_groups(inferred)
    result.update(opset=model.opset_import[0].version, ir_version=model.ir_version, producer=model.producer_name,
                  inputs={i.name: dims(i) for i in model.graph.input}, outputs={o.name: dims(o) for o in model.graph.output})
    # OpenCV 4.6 computes every GRU in the linear_before_reset = 1 form whatever the attribute says:
    # the attribute is reported for the test to check.
    result["gru_linear_before_reset"] = [next((a.i for a in n.attribute if a.name == "linear_before_reset"), 0)
                                         for n in model.graph.node if n.op_type == "GRU"]
    assert model.producer_name == "trainer", model.producer_name
    for i in model.graph.input:
        assert dims(i)[0] == "N", f"input {i.name}: the batch dimension is not dynamic: {dims(i)}"
    if len(model.graph.input) == 1 and len(dims(model.graph.input[0])) == 4:  # an image model says what it takes
        want = "raw pixels 0..255" if a.raw else "the normalised image"
        assert want in model.doc_string, f"the model's doc_string does not say '{want}': {model.doc_string}"

    expected = np.load(a.expected)
    raw = np.load(a.inputs)
    feeds = {}
    if raw.ndim == 4:  # an image model: NHWC pixels -> NCHW
        (inp,) = model.graph.input
        if a.raw:  # as an application would: OpenCV's own blob maker (RGB already: no swap)
            feeds[inp.name] = cv2.dnn.blobFromImages([im.astype(np.float32) for im in raw], 1.0,
                                                     (raw.shape[2], raw.shape[1]), 0, swapRB=False, crop=False)
        else:
            feeds[inp.name] = np.ascontiguousarray(normalise(raw, a.stats, a.mean, a.scale).transpose(0, 3, 1, 2))
    else:  # the inputs' elements one after another per sample
        at = 0
        flat = raw.reshape(raw.shape[0], -1).astype(np.float32)
        for i in model.graph.input:
            shape = [int(d) for d in dims(i)[1:]]
            n = int(np.prod(shape))
            feeds[i.name] = np.ascontiguousarray(flat[:, at:at + n].reshape([raw.shape[0]] + shape))
            at += n
        assert at == flat.shape[1], f"{flat.shape[1]} values per sample, the model's inputs take {at}"

    path, feeds = opencv_feedable(model, a.model, feeds)
    result["opencv_input_wrapper"] = path != a.model
    try:
        net = cv2.dnn.readNetFromONNX(path)
        for name, blob in feeds.items():
            net.setInput(blob, name)
        got = net.forward()
    except cv2.error as e:
        reason = " ".join(str(e).split())
        result["opencv"] = "refused: " + reason[-300:]
        print(json.dumps(result))
        return 0 if a.allow_opencv_refusal else 1
    got = np.asarray(got, dtype=np.float32).reshape(expected.shape[0], -1)
    if got.shape[1] == 1 and expected.shape[1] == 2:  # one sigmoid unit; predict lists both classes: 1 - p, p
        got = np.concatenate([1 - got, got], axis=1)
    diff = float(np.max(np.abs(got - expected)))
    result.update(opencv="ok", max_abs_diff=diff, samples=int(expected.shape[0]),
                  same_argmax=bool((got.argmax(1) == expected.argmax(1)).all()) if expected.shape[1] > 1 else True)
    print(json.dumps(result))
    return 0 if diff <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
