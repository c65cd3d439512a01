#!/usr/bin/env python3
"""Writes small valid seed inputs for the libFuzzer targets (scripts/fuzz.sh) into OUT/<target>/.

Standard library only. Each seed is shaped as its target reads input (tests/fuzz/*_fuzz.cpp):
idx, npy and llmc targets take two files after a 2-byte length, cifar a leading byte that picks the reader.
  scripts/fuzz-seeds.py OUT
"""
import gzip
import json
import os
import struct
import sys
import zlib


def put(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def png(width, height, color, depth, interlace=0, extra=b""):
    """A PNG of a gradient in every colour type / bit depth libpng reads (no interlaced pixel order
    is needed for a seed: the decoder must cope with whatever the rows hold)."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    row_bytes = (width * channels * depth + 7) // 8
    raw = b"".join(b"\0" + bytes((x * 37 + y * 11) & 0xFF for x in range(row_bytes)) for y in range(height))
    if interlace:  # enough bytes for the seven passes' rows (each with its filter byte)
        raw = raw + raw

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace)
    plte = chunk(b"PLTE", bytes(range(48))) if color == 3 else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + plte + extra + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def npy(shape, descr, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % s for s in shape) if len(shape) != 1 else "%d," % shape[0])
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def split(first, second):
    """Two files as idx_fuzz / npy_fuzz read them (fuzz::split): the first's length, then both."""
    return struct.pack("<H", len(first)) + first + second


def main(out):
    # PNG: gray 1/2/4/8/16 bits, RGB 8/16, palette, gray+alpha, RGBA, interlaced, a text chunk.
    for i, (color, depth, interlace) in enumerate([(0, 1, 0), (0, 2, 0), (0, 4, 0), (0, 8, 0), (0, 16, 0), (2, 8, 0),
                                                   (2, 16, 0), (3, 8, 0), (3, 4, 0), (4, 8, 0), (6, 8, 0), (6, 16, 0),
                                                   (2, 8, 1)]):
        put(out, "png", "gen%02d.png" % i, png(5 + i % 3, 3 + i % 4, color, depth, interlace))
    text = b"tEXt" + b"Comment\0seed"
    put(out, "png", "text.png", png(4, 4, 2, 8, extra=struct.pack(">I", len(text) - 4) + text +
                                    struct.pack(">I", zlib.crc32(text))))

    # IDX: 3 images of 4x5 and their labels, raw and gzip-compressed.
    images = struct.pack(">IIII", 2051, 3, 4, 5) + bytes(range(60))
    labels = struct.pack(">II", 2049, 3) + bytes([0, 7, 255])
    put(out, "idx", "raw", split(images, labels))
    put(out, "idx", "gz", split(gzip.compress(images), gzip.compress(labels)))
    put(out, "idx", "mixed", split(gzip.compress(images), labels))

    # CIFAR: two records of CIFAR-10 (1 label byte) and of CIFAR-100 (2), selected by the first byte.
    px = bytes((i * 7) & 0xFF for i in range(3072))
    put(out, "cifar", "cifar10", bytes([0]) + bytes([3]) + px + bytes([9]) + px)
    put(out, "cifar", "cifar100-fine", bytes([1]) + bytes([4, 77]) + px + bytes([19, 99]) + px)
    put(out, "cifar", "cifar100-coarse", bytes([2]) + bytes([4, 77]) + px)

    # npy: x of each dtype with labels.
    labels3 = npy([3], "<i8", struct.pack("<3q", 0, 1, 2))
    put(out, "npy", "f4", split(npy([3, 2], "<f4", struct.pack("<6f", 0, 1, 2, 3, 4, 5)), labels3))
    put(out, "npy", "f8", split(npy([3], "<f8", struct.pack("<3d", 0.5, -1, 1e300)), labels3))
    put(out, "npy", "u1", split(npy([3, 2, 2], "|u1", bytes(range(12))), npy([3], "|u1", bytes([1, 0, 1]))))
    put(out, "npy", "i4", split(npy([3, 1], "<i4", struct.pack("<3i", -1, 0, 1)), npy([3, 1], "<i4", struct.pack("<3i", 0, 0, 1))))
    put(out, "npy", "scalar", split(npy([], "<f4", struct.pack("<f", 1)), labels3))

    # llmc: an llm.c token shard (version 1, uint16; version 2, uint32) with a tokenizer file (versions 2 and 1).
    def words(*w):
        return struct.pack("<%dI" % len(w), *w) + b"\0" * (1024 - 4 * len(w))
    shard1 = words(20240520, 1, 20) + struct.pack("<20H", *range(20))
    shard2 = words(20240520, 2, 12) + struct.pack("<12I", *(i * 7 % 300 for i in range(12)))
    pieces = [b"a", b" b", b"<|endoftext|>"]
    tok2 = words(20240328, 2, 3, 2) + b"".join(bytes([len(p)]) + p for p in pieces)
    tok1 = words(20240328, 1, 3) + b"".join(bytes([len(p)]) + p for p in pieces)  # version 1 needs 50257 tokens: refused
    put(out, "llmc", "v1-v2", split(shard1, tok2))
    put(out, "llmc", "v2-v1", split(shard2, tok1))

    # safetensors: F32 and I64 tensors, metadata, an empty tensor.
    put(out, "safetensors", "two", safetensors([("w", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                                                ("step", "I64", [], struct.pack("<q", 35))], {"format": "trainer-checkpoint"}))
    put(out, "safetensors", "empty", safetensors([("e", "F32", [0, 3], b""), ("b", "BF16", [2], b"\0\x3f\0\x40")]))

    # --set overrides (one per line), as the CLI is given them.
    put(out, "overrides", "basic", b"optimizer.lr=0.05\ntrain.epochs=2\nmodel.layers.0.filters=8\n")
    put(out, "overrides", "nested", b"data.train={type: synthetic, size: 32, image_size: 8}\nschedule.type=poly\n"
                                    b"model.layers.3={name: dense, type: dense, units: 5}\ncheckpoint.keep=1\n")
    put(out, "overrides", "new-key", b"callbacks=[{type: early_stopping, patience: 2}]\ndevices.cpu=2\n")


if __name__ == "__main__":
    main(sys.argv[1])
